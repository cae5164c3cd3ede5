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
from typing import Dict, List, Optional, Tuple

from vit_jax.base import errors
from vit_jax.models import family_registry

BUCKET = "gs://vit_models"  # the original repository's bucket
LOCAL_DIR = "checkpoints"  # where vit_jax.download puts files, relative to the working dir
AUGREG_INDEX = f"{BUCKET}/augreg/index.csv"  # behind the closed bucket too
_HTTPS_ROOT = "https://storage.googleapis.com/"
# The Cloud Storage clients' variable for an emulator: the bucket's HTTPS root moves there.
EMULATOR_ENV = "STORAGE_EMULATOR_HOST"
# A released file name: letters, digits and . _ + = - (no '/', '%', nor a leading dot).
_FILE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+=-]*")


def has_scheme(path: str) -> bool:
  return "://" in str(path)


def folders() -> Dict[str, str]:
  """Every family's bucket folders: name -> what its files are (the default family's
  description where two share a folder name)."""
  found = {}
  for family in reversed(family_registry.families()):
    if family.bucket is not None:
      for folder, about in family.bucket.folders.items():
        found.setdefault(folder, about)
  return found


def _bucket_names() -> List[str]:
  return [family.bucket.url[len("gs://"):] for family in family_registry.families()
          if family.bucket is not None]


def _model_family(name: str):
  """The family of a model name (any spelling), or None for a name that is no model's."""
  try:
    return family_registry.for_model_name(name)
  except ValueError:
    return None


def _canonical_file_name(folder: str, name: str) -> Tuple[str, str]:
  """(the bucket holding file NAME of `folder`, NAME with its model part spelt as the bucket
  spells it: `vit-b_16` -> `ViT-B_16`; bucket names are case-sensitive). Names that are no
  known model are kept as typed, in the default bucket: the buckets hold more than the
  names listed here."""
  if folder == "augreg":  # <model>-<pre-training setup>[--<fine-tuning setup>]
    model, sep, rest = name.partition("-")
  else:  # <released name>[-224]
    model, sep, rest = (name[:-4], "-", "224") if name.endswith("-224") else (name, "", "")
  family = _model_family(model)
  if family is None or family.bucket is None or folder not in family.bucket.folders:
    return BUCKET, name
  stem = family.bucket.file_stem(folder, family.names.canonical(model))
  return family.bucket.url, stem + sep + rest


def is_file_name(name: str) -> bool:
  """A name, never a path: letters, digits and . _ + = -, no '..'."""
  return bool(_FILE_NAME.fullmatch(name)) and ".." not in name


def family_url(folder: str, name: str) -> str:
  """gs:// URL of file NAME (with or without `.npz`) of a released folder."""
  known = folders()
  if folder not in known:
    raise errors.InvalidInput(
        f"unknown checkpoint family {folder!r}; families: {', '.join(known)}")
  if not is_file_name(name):
    raise errors.InvalidInput(
        f"{folder}/{name} is no released file name (a name is letters, digits and . _ + = -, "
        f"never a path): python -m vit_jax.download --list {folder} shows what there is")
  bucket, name = _canonical_file_name(
      folder, name[:-len(".npz")] if name.endswith(".npz") else name)
  return f"{bucket}/{folder}/{name}.npz"


def released_i21k_url(model_name: str) -> str:
  """The ImageNet-21k checkpoint to fine-tune a released model from."""
  family = family_registry.for_model_name(model_name)
  canonical = family.names.canonical(model_name)
  if family.bucket is None:
    raise errors.InvalidInput(f"{canonical} is {family.a_title} model, which has no released "
                              f"files in a bucket ({family.guide})")
  folder, _, stem = family.bucket.start_file(canonical).partition("/")
  return family_url(folder, stem)


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
  """Read anonymously over HTTPS: the families' buckets (gs://vit_models, ...) and any file
  on storage.googleapis.com."""
  return str(url).startswith(tuple(f"gs://{bucket}/" for bucket in _bucket_names())
                             + (_HTTPS_ROOT,))


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
  """A URL of a family's bucket (gs://vit_models, ...), as gs:// or over HTTPS."""
  url = str(url)
  return any(url.startswith(root + bucket + "/") for bucket in _bucket_names()
             for root in ("gs://", _HTTPS_ROOT, _https_root()))


def bucket_path(url: str) -> str:
  """`FAMILY/FILE.npz` of a released-bucket URL (either form): the mirror table's key
  (the families' file names never collide)."""
  for root in ("gs://", _HTTPS_ROOT, _https_root()):
    for bucket in _bucket_names():
      if url.startswith(root + bucket + "/"):
        return urllib.parse.unquote(url[len(root + bucket + "/"):])
  raise errors.InvalidInput(f"{url} is in none of the released buckets "
                            f"({', '.join('gs://' + b for b in _bucket_names())})")


def resolve(name_or_url: str, local_dir: Optional[str] = LOCAL_DIR) -> str:
  """A path or URL for load_npz; raises ValueError (one line) for an unknown family or name.

  A released file already in `local_dir` (None: don't look) is returned as that local path.
  """
  expanded = os.path.expanduser(str(name_or_url))
  if has_scheme(expanded) or os.path.exists(expanded):
    return expanded
  folder, sep, name = expanded.partition("/")
  known = folders()
  if sep and folder in known and name:
    url = family_url(folder, name)
  elif expanded.endswith(".npz") or expanded.startswith((".", "/")):
    return expanded  # a local file that is missing: load_npz says so
  elif sep and _model_family(expanded) is None:  # model names may be written ViT-B/16
    raise errors.InvalidInput(
        f"{name_or_url!r} is neither a file nor FAMILY/NAME: unknown checkpoint "
        f"family {folder!r}; families: {', '.join(known)}")
  else:
    try:
      url = released_i21k_url(expanded)
    except ValueError as e:
      raise errors.InvalidInput(
          f"{name_or_url!r} is not a file, a URL or FAMILY/NAME (families: "
          f"{', '.join(known)}), and as a model name: {e}") from None
  if local_dir is not None and os.path.exists(local_path(url, local_dir)):
    return local_path(url, local_dir)
  return url
