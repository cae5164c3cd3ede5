"""Where the released checkpoints live, and the names users type for them.

`resolve()` turns what a user types into a path or URL that load_npz reads:
  * a local path or any URL with a scheme (gs://, https://, file://) -> unchanged;
  * FAMILY/NAME, e.g. `imagenet21k/ViT-B_16`, `augreg/B_16-i21k-300ep-...`,
    `imagenet21k+imagenet2012/ViT-L_16-224`;
  * a bare released model name (`ViT-B_16`, `B_16`) -> its ImageNet-21k checkpoint, the
    usual start for fine-tuning.
A released file already in `checkpoints/FAMILY/FILE.npz` is used instead of the bucket.
This module only names things (no network): vit_jax.checkpoints.hub fetches what is not
there yet, from the file's Hugging Face Hub mirror first (the bucket refuses anonymous
downloads since February 2026).
"""

import os
import re
import urllib.parse
from typing import Optional

from vit_jax.base import errors
from vit_jax.families.vit import names as zoo

BUCKET = "gs://vit_models"
MIXER_BUCKET = "gs://mixer_models"  # the MLP-Mixers' files, in families of their own
BUCKET_NAMES = ("vit_models", "mixer_models")
LOCAL_DIR = "checkpoints"  # where vit_jax.download puts files, relative to the working dir
FAMILIES = {
    "imagenet21k": "pre-trained on ImageNet-21k at 224 px (pre_logits + 21843-way head)",
    "imagenet21k+imagenet2012": "then fine-tuned on ImageNet at 384 px (`-224`: at 224 px)",
    "augreg": "AugReg ('How to train your ViT'): many pre-training and fine-tuning setups",
    "sam": "trained on ImageNet-1k with the SAM optimizer, no strong augmentation",
    "gsam": "trained on ImageNet-1k with the GSAM optimizer",
    "imagenet1k": "MLP-Mixers trained on ImageNet-1k at 224 px (1000-way head)",
}
# gs://mixer_models, as the original README and notebook list it: family -> files. A bare
# Mixer name means its imagenet21k file (21843-way head, no pre_logits), as for ViTs.
MIXER_FILES = {
    "imagenet1k": ("Mixer-B_16", "Mixer-L_16"),
    "imagenet21k": ("Mixer-B_16", "Mixer-L_16"),
    "sam": ("Mixer-B_16", "Mixer-B_32"),
    "gsam": ("Mixer-B_16", "Mixer-B_32", "Mixer-S_16", "Mixer-S_32", "Mixer-S_8"),
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
AUGREG_INDEX = f"{BUCKET}/augreg/index.csv"  # behind the closed bucket too
_HTTPS_ROOT = "https://storage.googleapis.com/"
# The Cloud Storage clients' variable for an emulator: the bucket's HTTPS root moves there.
EMULATOR_ENV = "STORAGE_EMULATOR_HOST"
# A released file name: letters, digits and . _ + = - (no '/', '%', nor a leading dot).
_FILE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+=-]*")


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


def is_file_name(name: str) -> bool:
  """A name, never a path: letters, digits and . _ + = -, no '..'."""
  return bool(_FILE_NAME.fullmatch(name)) and ".." not in name


def family_url(family: str, name: str) -> str:
  """gs:// URL of file NAME (with or without `.npz`) of a released family."""
  if family not in FAMILIES:
    raise errors.InvalidInput(
        f"unknown checkpoint family {family!r}; families: {', '.join(FAMILIES)}")
  if not is_file_name(name):
    raise errors.InvalidInput(
        f"{family}/{name} is no released file name (a name is letters, digits and . _ + = -, "
        f"never a path): python -m vit_jax.download --list {family} shows what there is")
  name = _canonical_file_name(family, name[:-len(".npz")] if name.endswith(".npz") else name)
  if _is_model_name(name) and zoo.is_mixer(name):
    return f"{MIXER_BUCKET}/{family}/{name}.npz"
  return f"{BUCKET}/{family}/{name}.npz"


def _is_model_name(text: str) -> bool:
  try:
    zoo.canonical_name(text)
  except ValueError:
    return False
  return True


def released_i21k_url(model_name: str) -> str:
  """The ImageNet-21k checkpoint to fine-tune a released model from."""
  canonical = zoo.canonical_name(model_name)
  if canonical in MIXER_FILES["imagenet21k"]:
    return family_url("imagenet21k", canonical)
  if zoo.is_mixer(canonical):
    files = [f"{family}/{canonical}" for family, names in MIXER_FILES.items()
             if canonical in names]
    raise errors.InvalidInput(f"no released ImageNet-21k file of {canonical}; released: "
                              f"{', '.join(files) or 'none (train it from scratch)'}")
  if canonical in ORIGINAL_I21K:
    return family_url("imagenet21k", canonical)
  if canonical in AUGREG_I21K:
    return family_url("augreg", AUGREG_I21K[canonical])
  raise errors.InvalidInput(f"no released ImageNet-21k checkpoint is known for {canonical}")


def local_path(url: str, directory: str = LOCAL_DIR) -> str:
  """Where vit_jax.download keeps `url`: DIR/FAMILY/FILE for released files, else DIR/FILE.

  Raises InvalidInput (a ValueError) for a URL that names no file (`http://host/`,
  `.../..`): the result never lies outside `directory`."""
  path = urllib.parse.urlparse(url).path if has_scheme(url) else url
  parts = urllib.parse.unquote(path).split("/")
  keep = parts[-2:] if is_bucket_url(url) and len(parts) >= 2 else parts[-1:]
  if not all(is_file_name(part) for part in keep):
    raise errors.InvalidInput(f"{url} names no file to save (it must end in a file name, "
                              "e.g. .../model.npz)")
  return os.path.join(directory, *keep)


def _https_root() -> str:
  host = os.environ.get(EMULATOR_ENV)
  if not host:
    return _HTTPS_ROOT
  return (host if "://" in host else f"http://{host}").rstrip("/") + "/"


def is_public(url: str) -> bool:
  """Read anonymously over HTTPS: gs://vit_models, gs://mixer_models, and any file on
  storage.googleapis.com."""
  return str(url).startswith((BUCKET + "/", MIXER_BUCKET + "/", _HTTPS_ROOT))


def https_url(url: str) -> str:
  """gs://bucket/path -> https://storage.googleapis.com/bucket/path: no gcloud needed
  ($STORAGE_EMULATOR_HOST, when set, in place of storage.googleapis.com, also for URLs
  that name it)."""
  if url.startswith(_HTTPS_ROOT):
    return _https_root() + url[len(_HTTPS_ROOT):]
  if not url.startswith("gs://"):
    return url
  return _https_root() + urllib.parse.quote(url[len("gs://"):], safe="/+")


def is_bucket_url(url: str) -> bool:
  """A URL of gs://vit_models or gs://mixer_models, as gs:// or over HTTPS."""
  url = str(url)
  return any(url.startswith(root + bucket + "/") for bucket in BUCKET_NAMES
             for root in ("gs://", _HTTPS_ROOT, _https_root()))


def bucket_path(url: str) -> str:
  """`FAMILY/FILE.npz` of a released-bucket URL (either form): the mirror table's key
  (Mixer and ViT file names never collide)."""
  for root in ("gs://", _HTTPS_ROOT, _https_root()):
    for bucket in BUCKET_NAMES:
      if url.startswith(root + bucket + "/"):
        return urllib.parse.unquote(url[len(root + bucket + "/"):])
  raise errors.InvalidInput(f"{url} is not in {BUCKET} or {MIXER_BUCKET}")


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
