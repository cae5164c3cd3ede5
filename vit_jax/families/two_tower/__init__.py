"""The two-tower (image-text) family: LiT, SigLIP and SigLIP 2, an image tower (a ViT, or
NaFlex's) beside a text tower (LiT's transformer, BERT, SigLIP's), their released names,
big_vision's .npz layout and Hugging Face SigLIP folders. Registered as 'two_tower'."""

from vit_jax.families.two_tower import (benchmark_parts, conversion, export_signature,
                                        hf_layout, names, npz_file, opening, pair_training,
                                        training_rules, zero_shot)
from vit_jax.families.two_tower.model import TwoTower
from vit_jax.models import family_contract, family_registry

FAMILY = family_registry.register(family_contract.Family(
    name="two_tower", title="two-tower (LiT / SigLIP)", guide="docs/two_towers.md",
    words=r"(?i)two[ _-]?towers?|siglip|\blit\b",
    module_types=(TwoTower,), names=names, released_file=npz_file, converter=conversion,
    layouts={"hf": hf_layout}, fetcher=names, claims=opening.claims, loads_as="vit",
    zero_shot=zero_shot, export_signature=export_signature, benchmark_parts=benchmark_parts,
    training=training_rules.RULES, pair_training=pair_training))
