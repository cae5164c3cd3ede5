"""Class names carried with a released-layout .npz, so that a model trained on an image
folder predicts names, not label indices.

They live in the zip archive's comment (an .npz is a zip), as ASCII JSON
`{"vit_jax": {"class_names": [...]}}`: np.load ignores archive comments, so every reader
of the layout (ours, timm's, the original google-research/vision_transformer loader)
sees exactly the arrays it saw before. An extra array would not do: the original loader
keeps unknown keys in the params tree, and a string array there breaks optax's init and
flax's replicate. A comment holds at most 65,535 bytes (about 5,000 typical names); a
longer list goes to `<file>.classes.json` beside the file.

ensure_ascii JSON keeps names with emoji or undecodable bytes (folder names that
os.listdir returns with surrogate escapes) exact, and can never contain the zip
end-of-archive signature a reader searches for.
"""

import io
import json
import os
import zipfile
from typing import List, Optional, Sequence

from vit_jax import errors

COMMENT_LIMIT = 0xFFFF  # the zip format's 16-bit comment length
SIDECAR_SUFFIX = ".classes.json"
_KEY = "vit_jax"


def _encode(class_names: Sequence[str]) -> bytes:
  return json.dumps({_KEY: {"class_names": list(class_names)}},
                    ensure_ascii=True).encode("ascii")


def _decode(text: bytes) -> Optional[List[str]]:
  """The names in a comment or sidecar of ours; None for anything else (other tools
  write archive comments too)."""
  try:
    names = json.loads(text.decode("ascii"))[_KEY]["class_names"]
  except (ValueError, KeyError, TypeError, UnicodeDecodeError):
    return None
  if not isinstance(names, list) or not all(isinstance(name, str) for name in names):
    return None
  return names


def with_class_names(npz_bytes: bytes, class_names: Optional[Sequence[str]]
                     ) -> "tuple[bytes, Optional[bytes]]":
  """(the .npz bytes with the names in its comment, sidecar bytes or None). The sidecar
  is only needed when the list is too long for a comment."""
  if class_names is None:
    return npz_bytes, None
  encoded = _encode(class_names)
  if len(encoded) > COMMENT_LIMIT:
    return npz_bytes, encoded
  buffer = io.BytesIO(npz_bytes)
  with zipfile.ZipFile(buffer, "a") as archive:
    archive.comment = encoded
  return buffer.getvalue(), None


def sidecar_path(path: str) -> str:
  return path + SIDECAR_SUFFIX


def _open(path: str):
  if "://" in path:
    import tensorflow as tf  # only URLs need it
    return tf.io.gfile.GFile(path, "rb")
  return open(path, "rb")


def _read_sidecar(path: str) -> Optional[List[str]]:
  try:
    with _open(sidecar_path(path)) as f:
      return _decode(f.read())
  except Exception:  # pylint: disable=broad-except  # absent (any filesystem): no names
    return None


def read_class_names(path: str) -> Optional[List[str]]:
  """The class names saved with the .npz at `path` (label order), or None when it
  carries none (released checkpoints, files from other tools, timm / HF models).

  Reads only the archive's directory, not the arrays. Raises FileNotFoundError for a
  missing file and ValueError for one that is not an .npz.
  """
  path = os.fsdecode(path)  # str, bytes or a path object
  try:
    with _open(path) as f:
      comment = zipfile.ZipFile(f).comment
  except zipfile.BadZipFile:
    raise errors.InvalidInput(f"{path} is not a valid .npz (not a zip archive): it carries "
                              "no class names") from None
  except IsADirectoryError:
    raise errors.InvalidInput(f"{path} is a directory, not an .npz file") from None
  names = _decode(comment) if comment else None
  return names if names is not None else _read_sidecar(path)
