"""The MLP-Mixer family (Tolstikhin et al., 2021), the original repository's second one:
Mixer-S to H by name, the released gs://mixer_models files and timm's layout, fine-tuning
at another resolution by resizing the token-mixing MLPs. Registered as 'mixer'."""

from vit_jax.families.mixer import (bucket_files, conversion, geometry, hub_mirrors, names,
                                    npz_file, timm_layout)
from vit_jax.families.mixer import training_rules
from vit_jax.families.mixer.model import MlpMixer
from vit_jax.models import family_contract, family_registry

FAMILY = family_registry.register(family_contract.Family(
    name="mixer", title="MLP-Mixer", guide="docs/mixer.md", module_types=(MlpMixer,),
    words=r"(?i)mixer",
    names=names, released_file=npz_file, converter=conversion,
    layouts={"timm": timm_layout}, geometry=geometry, bucket=bucket_files.BUCKET,
    hub_mirrors=hub_mirrors, training=training_rules.RULES,
    refusals={
        "visualize": ": it has no attention or position embedding to draw (visualize "
                     "takes ViTs); python -m vit_jax.predict runs it",
        "vtab": "; vit_jax.vtab runs ViTs: fine-tune a Mixer on each task with python -m "
                "vit_jax.main --config=configs/mixer_b16.py:vtab/TASK",
        "naflex": "; NaFlex (config.pp.max_patches, --max_patches) runs ViTs only: leave "
                  "it out or pass 0 (square images)",
    }))
