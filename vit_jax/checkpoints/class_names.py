"""Class names carried with a released-layout .npz, so that a model trained on an image
folder predicts names, not label indices; and the NaFlex patch budget a run trained it at,
so that every tool reads the file as NaFlex again (vit_jax.checkpoints.naflex_reading).

They live in the zip archive's comment (an .npz is a zip), as ASCII JSON
`{"vit_jax": {"class_names": [...]}}` (plus `"multi_label": true` for a head trained
on multi-label data, whose scores are independent sigmoids, not one softmax, and
`"max_patches": N` for a model trained with config.pp.max_patches=N): np.load
ignores archive comments, so every reader of the layout (ours, timm's, the original
google-research/vision_transformer loader) sees exactly the arrays it saw before. An
extra array would not do: the original loader keeps unknown keys in the params tree, and
a string array there breaks optax's init and flax's replicate. A comment holds at most
65,535 bytes (about 5,000 typical names); a longer list goes to `<file>.classes.json`
beside the file. The comment is bytes of the file: a copy (cp, gsutil, an upload) keeps
it; save_npz writes it only when told (its class_names, multi_label, max_patches).

ensure_ascii JSON keeps names with emoji or undecodable bytes (folder names that
os.listdir returns with surrogate escapes) exact, and can never contain the zip
end-of-archive signature a reader searches for.
"""

import io
import json
import os
import zipfile
from typing import List, Optional, Sequence

from vit_jax.base import errors, storage

COMMENT_LIMIT = 0xFFFF  # the zip format's 16-bit comment length
SIDECAR_SUFFIX = ".classes.json"
_KEY = "vit_jax"


def _encode(class_names: Optional[Sequence[str]], multi_label: bool,
            max_patches: Optional[int]) -> bytes:
  record = {}
  if class_names is not None:
    record["class_names"] = list(class_names)
  if multi_label:
    record["multi_label"] = True
  if max_patches is not None:
    record["max_patches"] = int(max_patches)
  return json.dumps({_KEY: record}, ensure_ascii=True).encode("ascii")


def _budget(value) -> Optional[int]:
  return value if isinstance(value, int) and not isinstance(value, bool) and value >= 1 else None


def _decode(text: bytes) -> Optional[dict]:
  """The record in a comment or sidecar of ours ({'class_names' (None: none saved),
  'multi_label', 'max_patches' (None: square images)}); None for anything else (other
  tools write archive comments too)."""
  try:
    record = json.loads(text.decode("ascii"))[_KEY]
    names = record.get("class_names")
  except (ValueError, KeyError, TypeError, AttributeError, UnicodeDecodeError):
    return None
  if names is not None and (not isinstance(names, list)
                            or not all(isinstance(name, str) for name in names)):
    return None
  return {"class_names": names, "multi_label": names is not None and
          record.get("multi_label") is True, "max_patches": _budget(record.get("max_patches"))}


def with_class_names(npz_bytes: bytes, class_names: Optional[Sequence[str]],
                     multi_label: bool = False, max_patches: Optional[int] = None
                     ) -> "tuple[bytes, Optional[bytes]]":
  """(the .npz bytes with the names and NaFlex budget in its comment, sidecar bytes or
  None). The sidecar is only needed when the list is too long for a comment."""
  if class_names is None and max_patches is None:
    return npz_bytes, None
  encoded = _encode(class_names, multi_label, max_patches)
  if len(encoded) > COMMENT_LIMIT:
    return npz_bytes, encoded
  buffer = io.BytesIO(npz_bytes)
  with zipfile.ZipFile(buffer, "a") as archive:
    archive.comment = encoded
  return buffer.getvalue(), None


def sidecar_path(path: str) -> str:
  return path + SIDECAR_SUFFIX


def _read_sidecar(path: str) -> Optional[dict]:
  try:
    with storage.open_read(sidecar_path(path)) as f:
      return _decode(f.read())
  except Exception:  # pylint: disable=broad-except  # absent (any filesystem): no names
    return None


def read_class_names(path: str) -> Optional[List[str]]:
  """The class names saved with the .npz at `path` (label order), or None when it
  carries none (released checkpoints, files from other tools, timm / HF models).

  Reads only the archive's directory, not the arrays. Raises FileNotFoundError for a
  missing file and ValueError for one that is not an .npz.
  """
  record = read_head_record(path)
  return None if record is None else record["class_names"]


def read_max_patches(path: str) -> Optional[int]:
  """The NaFlex patch budget the .npz at `path` was trained at (config.pp.max_patches),
  or None for a square-image model or a file that says nothing."""
  record = read_head_record(path)
  return None if record is None else record["max_patches"]


def read_multi_label(path: str) -> bool:
  """Whether the .npz at `path` was saved as a multi-label head (sigmoid scores); False
  for files that say nothing (released checkpoints: softmax)."""
  record = read_head_record(path)
  return record is not None and record["multi_label"]


def read_head_record(path: str) -> Optional[dict]:
  """{'class_names', 'multi_label', 'max_patches'} saved with the .npz at `path`, or None
  (see read_class_names)."""
  path = os.fsdecode(path)  # str, bytes or a path object
  try:
    with storage.open_read(path) as f:
      comment = zipfile.ZipFile(f).comment
  except zipfile.BadZipFile:
    raise errors.InvalidInput(f"{path} is not a valid .npz (not a zip archive): it carries "
                              "no class names") from None
  except IsADirectoryError:
    raise errors.InvalidInput(f"{path} is a directory, not an .npz file") from None
  record = _decode(comment) if comment else None
  return record if record is not None else _read_sidecar(path)
