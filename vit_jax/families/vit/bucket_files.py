"""The original repository's released ViT files in gs://vit_models (the family contract's
Bucket part): its folders, and the file a bare model name fine-tunes from."""

from vit_jax.base import errors
from vit_jax.families.vit import names
from vit_jax.models import family_contract

FOLDERS = {
    "imagenet21k": "pre-trained on ImageNet-21k at 224 px (pre_logits + 21843-way head)",
    "imagenet21k+imagenet2012": "then fine-tuned on ImageNet at 384 px (`-224`: at 224 px)",
    "augreg": "AugReg ('How to train your ViT'): many pre-training and fine-tuning setups",
    "sam": "trained on ImageNet-1k with the SAM optimizer, no strong augmentation",
}
# Models whose paper-era ImageNet-21k file in gs://vit_models/imagenet21k/ starts a
# bare-name fine-tuning (all but R26+ViT-B_32 have a Hub mirror: hub_mirrors.json).
ORIGINAL_I21K = ("ViT-B_16", "ViT-B_32", "ViT-L_16", "ViT-L_32", "ViT-H_14",
                 "R50+ViT-B_16", "R26+ViT-B_32")
# For the others: the AugReg i21k file that timm mirrors on the Hub (timm's pick among the
# AugReg release's recommended ones). ViT-B_8 and R50+ViT-L_32 also have paper-era files
# (imagenet21k/ViT-B_8, imagenet21k/R50+ViT-L_32), which no Hub repository holds.
AUGREG_I21K = {
    "ViT-Ti_16": "Ti_16-i21k-300ep-lr_0.001-aug_none-wd_0.03-do_0.0-sd_0.0",
    "ViT-S_16": "S_16-i21k-300ep-lr_0.001-aug_light1-wd_0.03-do_0.0-sd_0.0",
    "ViT-S_32": "S_32-i21k-300ep-lr_0.001-aug_light1-wd_0.03-do_0.0-sd_0.0",
    "ViT-B_8": "B_8-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.0-sd_0.0",
    "R+ViT-Ti_16": "R_Ti_16-i21k-300ep-lr_0.001-aug_none-wd_0.03-do_0.0-sd_0.0",
    "R26+ViT-S_32": "R26_S_32-i21k-300ep-lr_0.001-aug_medium2-wd_0.03-do_0.0-sd_0.0",
    "R50+ViT-L_32": "R50_L_32-i21k-300ep-lr_0.001-aug_medium2-wd_0.1-do_0.0-sd_0.0",
}


def start_file(name: str) -> str:
  """The ImageNet-21k file to fine-tune a released ViT from: FOLDER/FILE."""
  canonical = names.canonical(name)
  if canonical in ORIGINAL_I21K:
    return f"imagenet21k/{canonical}"
  if canonical in AUGREG_I21K:
    return f"augreg/{AUGREG_I21K[canonical]}"
  raise errors.InvalidInput(f"no released ImageNet-21k checkpoint is known for {canonical}")


def file_stem(folder: str, name: str) -> str:
  """AugReg's files spell the model short (`B_16-i21k-...`), the others as released."""
  return names.augreg_name(name) if folder == "augreg" else name


BUCKET = family_contract.Bucket(url="gs://vit_models", folders=FOLDERS, listed={},
                                start_file=start_file, file_stem=file_stem)
