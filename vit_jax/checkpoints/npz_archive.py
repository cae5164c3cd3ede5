"""Reading an .npz archive safely: never unpickled (an object array is refused), read
eagerly so that a truncated or corrupt file fails here in one line, and bfloat16 / float16
arrays returned as float32. vit_jax.checkpoints.npz builds models from what this reads."""

import io
import os
import zipfile
import zlib
from typing import Dict

import ml_dtypes
import numpy as np

from vit_jax.base import console, storage
from vit_jax.checkpoints import formats
from vit_jax.checkpoints.npz_checks import CheckpointError

_DOWNLOAD_HINT = "fetch a released file with: python -m vit_jax.download imagenet21k/ViT-B_16"


def _directory_hint(path: str) -> str:
  """What to pass instead of a directory: the .npz files in it (a training workdir has
  params.npz), else a generic pointer."""
  try:
    files = sorted(name for name in os.listdir(path) if name.endswith(".npz"))
  except OSError:
    files = []
  if not files:
    return ("pass the path of an .npz file, or of a Hugging Face or timm model folder "
            f"(with {formats.CONFIG} and model.safetensors)")
  return "pass one of its .npz files: " + ", ".join(os.path.join(path, f) for f in files[:3]) + (
      f" (+{len(files) - 3} more)" if len(files) > 3 else "")


def _read_bytes(path: str) -> bytes:
  url = storage.is_url(path)
  if not url and not os.path.exists(path):
    raise FileNotFoundError(f"checkpoint not found: {path} (check the path, or {_DOWNLOAD_HINT})")
  if not url and os.path.isdir(path):
    raise CheckpointError(f"{path} is a directory, not an .npz checkpoint: "
                          f"{_directory_hint(path)}")
  try:
    return storage.read_bytes(path)
  except FileNotFoundError:
    raise FileNotFoundError(f"checkpoint not found: {path} (check the URL)") from None
  except OSError as e:
    fix = "the URL, your network and credentials" if url else "the path and its permissions"
    raise CheckpointError(f"cannot read {path}: {e.strerror or str(e).splitlines()[0]} "
                          f"(check {fix})") from None


def _upcast_half_precision(arrays: Dict[str, np.ndarray], path: str) -> Dict[str, np.ndarray]:
  """bfloat16 arrays (numpy stores them as 2-byte void, '|V2': big_vision writes such
  files) and float16 ones, as float32 values, with a note that precision was lower."""
  found = {}
  for key, value in arrays.items():
    if value.dtype.kind == "V" and value.dtype.itemsize == 2 and value.dtype.names is None:
      arrays[key] = value.view(ml_dtypes.bfloat16).astype(np.float32)
      found["bfloat16"] = found.get("bfloat16", 0) + 1
    elif value.dtype == np.float16:
      arrays[key] = value.astype(np.float32)
      found["float16"] = found.get("float16", 0) + 1
  if found:
    console.log.info("%s holds %s arrays: read as float32", path,
             " and ".join(f"{count} {dtype}" for dtype, count in sorted(found.items())))
  return arrays


def read_npz(path: str) -> Dict[str, np.ndarray]:
  """All arrays of an .npz as a flat dict, read eagerly so truncation shows up here;
  bfloat16 and float16 arrays come back as float32."""
  data = _read_bytes(os.fspath(path))
  if not data.startswith((b"PK\x03\x04", b"PK\x05\x06")):  # np.load would try unpickling
    raise CheckpointError(f"{path} is not a valid .npz (not a zip archive); the file is "
                          "truncated, corrupt or of another format: download or save it again")
  try:
    with np.load(io.BytesIO(data), allow_pickle=False) as archive:
      arrays = {key: archive[key] for key in archive.files}
  except ValueError as e:
    if "allow_pickle" in str(e):
      raise CheckpointError(
          f"{path} holds a pickled object array; vit_jax never unpickles checkpoints "
          "(that can run arbitrary code): re-save it with numeric arrays only") from None
    raise CheckpointError(f"{path} is not a valid .npz ({e}); the file is truncated or "
                          "corrupt: download or save it again") from None
  except (zipfile.BadZipFile, EOFError, OSError, zlib.error, KeyError) as e:
    raise CheckpointError(f"{path} is not a valid .npz ({type(e).__name__}: {e}); the file is "
                          "truncated or corrupt: download or save it again") from None
  return _upcast_half_precision(arrays, path)
