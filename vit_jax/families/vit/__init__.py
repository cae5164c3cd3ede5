"""The Vision Transformer family: plain ViTs, the R+ViT hybrids, big_vision's MAP-head and
sincos2d variants, NaFlex's padded-patch ViT and the masked-patch predictor, with the
original repository's released files, their timm / Hugging Face / big_vision layouts and
the AugReg names. Registered as 'vit', the default family."""

from vit_jax.families.vit import (bucket_files, conversion, geometry, hub_mirrors, hf_layout,
                                  names, npz_file, timm_layout)
from vit_jax.families.vit import training_rules
from vit_jax.families.vit.masked_patch_model import MaskedPatchPredictor
from vit_jax.families.vit.model import VisionTransformer
from vit_jax.families.vit.naflex_model import NaFlexViT
from vit_jax.models import family_contract, family_registry

FAMILY = family_registry.register(family_contract.Family(
    name="vit", title="ViT", guide="docs/python_api.md",
    module_types=(VisionTransformer, NaFlexViT, MaskedPatchPredictor),
    names=names, released_file=npz_file, converter=conversion,
    layouts={"hf": hf_layout, "timm": timm_layout}, geometry=geometry, bucket=bucket_files.BUCKET,
    hub_mirrors=hub_mirrors, training=training_rules.RULES))
