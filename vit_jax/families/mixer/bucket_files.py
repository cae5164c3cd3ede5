"""The released MLP-Mixer files in gs://mixer_models, as the original README and notebook
list them (the family contract's Bucket part). A bare Mixer name means its imagenet21k file
(21843-way head, no pre_logits), as for ViTs."""

from vit_jax.base import errors
from vit_jax.families.mixer import names
from vit_jax.models import family_contract

FOLDERS = {
    "imagenet21k": "pre-trained on ImageNet-21k at 224 px (21843-way head)",
    "sam": "trained on ImageNet-1k with the SAM optimizer, no strong augmentation",
    "gsam": "trained on ImageNet-1k with the GSAM optimizer",
    "imagenet1k": "MLP-Mixers trained on ImageNet-1k at 224 px (1000-way head)",
}
FILES = {
    "imagenet1k": ("Mixer-B_16", "Mixer-L_16"),
    "imagenet21k": ("Mixer-B_16", "Mixer-L_16"),
    "sam": ("Mixer-B_16", "Mixer-B_32"),
    "gsam": ("Mixer-B_16", "Mixer-B_32", "Mixer-S_16", "Mixer-S_32", "Mixer-S_8"),
}


def start_file(name: str) -> str:
  """imagenet21k/NAME where released, else one line listing the name's files."""
  canonical = names.canonical(name)
  if canonical in FILES["imagenet21k"]:
    return f"imagenet21k/{canonical}"
  files = [f"{folder}/{canonical}" for folder, released in FILES.items()
           if canonical in released]
  raise errors.InvalidInput(f"no released ImageNet-21k file of {canonical}; released: "
                            f"{', '.join(files) or 'none (train it from scratch)'}")


BUCKET = family_contract.Bucket(url="gs://mixer_models", folders=FOLDERS, listed=FILES,
                                start_file=start_file)
