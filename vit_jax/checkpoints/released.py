"""Where the released checkpoints live, and the names users type for them.

`resolve()` turns what a user types into a path or URL that load_npz reads:
  * a local path or any URL with a scheme (gs://, https://, file://) -> unchanged;
  * FAMILY/NAME, e.g. `imagenet21k/ViT-B_16`, `augreg/B_16-i21k-300ep-...`,
    `imagenet21k+imagenet2012/ViT-L_16-224`;
  * a bare released model name (`ViT-B_16`, `B_16`) -> its ImageNet-21k checkpoint, the
    usual start for fine-tuning.
A released file already fetched by `python -m vit_jax.download` into
`checkpoints/FAMILY/FILE.npz` is used instead of the bucket.
"""

import os
import urllib.parse
from typing import Optional

from vit_jax import errors
from vit_jax.models import zoo

BUCKET = "gs://vit_models"
LOCAL_DIR = "checkpoints"  # where vit_jax.download puts files, relative to the working dir
FAMILIES = {
    "imagenet21k": "pre-trained on ImageNet-21k at 224 px (pre_logits + 21843-way head)",
    "imagenet21k+imagenet2012": "then fine-tuned on ImageNet at 384 px (`-224`: at 224 px)",
    "augreg": "AugReg ('How to train your ViT'): many pre-training setups, see index.csv",
    "sam": "trained on ImageNet-1k with the SAM optimizer, no strong augmentation",
    "gsam": "trained on ImageNet-1k with the GSAM optimizer",
}
# Models whose paper-era ImageNet-21k file is in gs://vit_models/imagenet21k/.
ORIGINAL_I21K = ("ViT-B_16", "ViT-B_32", "ViT-B_8", "ViT-L_16", "ViT-L_32", "ViT-H_14",
                 "R50+ViT-B_16", "R26+ViT-B_32", "R50+ViT-L_32")
# For the others: the AugReg i21k file the AugReg release recommends (best upstream metrics).
AUGREG_I21K = {
    "ViT-Ti_16": "Ti_16-i21k-300ep-lr_0.001-aug_none-wd_0.03-do_0.0-sd_0.0",
    "ViT-S_16": "S_16-i21k-300ep-lr_0.001-aug_light1-wd_0.03-do_0.0-sd_0.0",
    "ViT-S_32": "S_32-i21k-300ep-lr_0.001-aug_none-wd_0.1-do_0.0-sd_0.0",
    "R+ViT-Ti_16": "R_Ti_16-i21k-300ep-lr_0.001-aug_none-wd_0.03-do_0.0-sd_0.0",
    "R26+ViT-S_32": "R26_S_32-i21k-300ep-lr_0.001-aug_light1-wd_0.1-do_0.0-sd_0.0",
}
AUGREG_INDEX = f"{BUCKET}/augreg/index.csv"
_HTTPS_ROOT = "https://storage.googleapis.com/"


def has_scheme(path: str) -> bool:
  return "://" in str(path)


def _canonical_file_name(family: str, name: str) -> str:
  """Fixes the model part's spelling (`vit-b_16` -> `ViT-B_16`): bucket names are case-sensitive.

  Names that are no known model are kept as typed: the buckets hold more than this zoo.
  """
  if family == "augreg":  # <model>-<pre-training setup>[--<fine-tuning setup>]
    model, sep, rest = name.partition("-")
    spell = lambda model: zoo.augreg_name(zoo.canonical_name(model))
  else:  # <released name>[-224]
    model, sep, rest = (name[:-4], "-", "224") if name.endswith("-224") else (name, "", "")
    spell = zoo.canonical_name
  try:
    return spell(model) + sep + rest
  except ValueError:
    return name


def family_url(family: str, name: str) -> str:
  """gs:// URL of file NAME (with or without `.npz`) of a released family."""
  if family not in FAMILIES:
    raise errors.InvalidInput(
        f"unknown checkpoint family {family!r}; families: {', '.join(FAMILIES)}")
  name = name[:-len(".npz")] if name.endswith(".npz") else name
  return f"{BUCKET}/{family}/{_canonical_file_name(family, name)}.npz"


def _is_model_name(text: str) -> bool:
  try:
    zoo.canonical_name(text)
  except ValueError:
    return False
  return True


def released_i21k_url(model_name: str) -> str:
  """The ImageNet-21k checkpoint to fine-tune a released model from."""
  canonical = zoo.canonical_name(model_name)
  if canonical in ORIGINAL_I21K:
    return family_url("imagenet21k", canonical)
  if canonical in AUGREG_I21K:
    return family_url("augreg", AUGREG_I21K[canonical])
  raise errors.InvalidInput(f"no released ImageNet-21k checkpoint is known for {canonical}")


def local_path(url: str, directory: str = LOCAL_DIR) -> str:
  """Where vit_jax.download keeps `url`: DIR/FAMILY/FILE for released files, else DIR/FILE."""
  path = urllib.parse.urlparse(url).path if has_scheme(url) else url
  parts = urllib.parse.unquote(path).strip("/").split("/")
  is_released = https_url(url).startswith(https_url(BUCKET) + "/") and len(parts) >= 2
  return os.path.join(directory, *(parts[-2:] if is_released else parts[-1:]))


def https_url(url: str) -> str:
  """gs://bucket/path -> https://storage.googleapis.com/bucket/path: no gcloud needed."""
  if not url.startswith("gs://"):
    return url
  return _HTTPS_ROOT + urllib.parse.quote(url[len("gs://"):], safe="/+")


def resolve(name_or_url: str, local_dir: Optional[str] = LOCAL_DIR) -> str:
  """A path or URL for load_npz; raises ValueError (one line) for an unknown family or name.

  A released file already in `local_dir` (None: don't look) is returned as that local path.
  """
  expanded = os.path.expanduser(str(name_or_url))
  if has_scheme(expanded) or os.path.exists(expanded):
    return expanded
  family, sep, name = expanded.partition("/")
  if sep and family in FAMILIES and name:
    url = family_url(family, name)
  elif expanded.endswith(".npz") or expanded.startswith((".", "/")):
    return expanded  # a local file that is missing: load_npz says so
  elif sep and not _is_model_name(expanded):  # model names may be written ViT-B/16
    raise errors.InvalidInput(
        f"{name_or_url!r} is neither a file nor FAMILY/NAME: unknown checkpoint "
        f"family {family!r}; families: {', '.join(FAMILIES)}")
  else:
    try:
      url = released_i21k_url(expanded)
    except ValueError as e:
      raise errors.InvalidInput(
          f"{name_or_url!r} is not a file, a URL or FAMILY/NAME (families: "
          f"{', '.join(FAMILIES)}), and as a model name: {e}") from None
  if local_dir is not None and os.path.exists(local_path(url, local_dir)):
    return local_path(url, local_dir)
  return url
