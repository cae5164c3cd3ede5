"""Released .npz checkpoints <-> (module, params).

Files are read from local paths or any URL tf.io.gfile understands (gs://...), are
never unpickled, and are validated key by key against the module they build, so a
wrong file fails with one line that names the problem instead of producing junk.
"""

import io
import logging
import os
import tempfile
import zipfile
import zlib
from typing import Any, Dict, Optional, Sequence, Tuple, Union

import jax
import jax.numpy as jnp
import numpy as np
from flax import traverse_util

from vit_jax import npz_layout, posemb, released
from vit_jax.models import vit, zoo

ImageSize = Union[int, Sequence[int]]
POSEMB_KEY = npz_layout.POSEMB
_DOWNLOAD_HINT = "fetch a released file with: python -m vit_jax.download imagenet21k/ViT-B_16"


class CheckpointError(ValueError):
  """A checkpoint that cannot be used; the message is one line naming problem and fix."""


def _read_bytes(path: str) -> bytes:
  if not released.has_scheme(path):
    if not os.path.exists(path):
      raise FileNotFoundError(f"checkpoint not found: {path} (check the path, or {_DOWNLOAD_HINT})")
    with open(path, "rb") as f:
      return f.read()
  import tensorflow as tf  # only URLs need it; it costs seconds to import.
  try:
    with tf.io.gfile.GFile(path, "rb") as f:
      return f.read()
  except tf.errors.NotFoundError:
    raise FileNotFoundError(f"checkpoint not found: {path} (check the URL)") from None
  except tf.errors.OpError as e:
    raise CheckpointError(f"cannot read {path}: {e.message.splitlines()[0]} "
                          "(check the URL, your network and credentials)") from None


def read_npz(path: str) -> Dict[str, np.ndarray]:
  """All arrays of an .npz as a flat dict, read eagerly so truncation shows up here."""
  data = _read_bytes(os.fspath(path))
  if not data.startswith((b"PK\x03\x04", b"PK\x05\x06")):  # np.load would try unpickling
    raise CheckpointError(f"{path} is not a valid .npz (not a zip archive); the file is "
                          "truncated, corrupt or of another format: download or save it again")
  try:
    with np.load(io.BytesIO(data), allow_pickle=False) as archive:
      return {key: archive[key] for key in archive.files}
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


def _atomic_write(data: bytes, path: str) -> None:
  """Writes all bytes or nothing: an existing file is only replaced by a complete one."""
  if released.has_scheme(path):
    import tensorflow as tf
    with tf.io.gfile.GFile(path, "wb") as f:  # object stores publish on close.
      f.write(data)
    return
  directory = os.path.dirname(os.path.abspath(path))
  os.makedirs(directory, exist_ok=True)
  fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-", suffix=".npz")
  try:
    with os.fdopen(fd, "wb") as f:
      f.write(data)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes files owner-only; outputs are shared
    os.replace(tmp, path)
  except BaseException:
    os.unlink(tmp)
    raise


def save_npz(params: Any, path: str) -> None:
  """Writes params in the released layout (flat `/` keys, float32, one entry per block
  also for scan_layers models), atomically."""
  if set(params) == {"params"}:
    params = params["params"]
  flat = traverse_util.flatten_dict(vit.to_block_layout(params), sep="/")
  buffer = io.BytesIO()
  np.savez(buffer, **{key: np.asarray(value, np.float32) for key, value in flat.items()})
  _atomic_write(buffer.getvalue(), os.fspath(path))


def _side_pair(image_size: ImageSize) -> Tuple[int, int]:
  if isinstance(image_size, int):
    return image_size, image_size
  height, width = image_size
  return int(height), int(width)


def expected_shapes(module: vit.VisionTransformer, image_size: ImageSize) -> Dict[str, tuple]:
  """Flat parameter shapes of `module` at `image_size`, without allocating anything."""
  height, width = _side_pair(image_size)
  shapes = jax.eval_shape(module.init, jax.random.PRNGKey(0),
                          jnp.zeros((1, height, width, 3), jnp.float32))
  return {k: v.shape for k, v in traverse_util.flatten_dict(shapes["params"], sep="/").items()}


def _list(keys) -> str:
  keys = sorted(keys)
  shown = ", ".join(keys[:6])
  return shown + (f" (+{len(keys) - 6} more)" if len(keys) > 6 else "")


def check_against(flat: Dict[str, np.ndarray], shapes: Dict[str, tuple], path: str) -> None:
  """Raises CheckpointError on missing/extra keys or the first shape mismatch."""
  missing, extra = set(shapes) - set(flat), set(flat) - set(shapes)
  if missing or extra:
    parts = ([f"missing {_list(missing)}"] if missing else []) + (
        [f"unexpected {_list(extra)}"] if extra else [])
    raise CheckpointError(f"{path} does not fit the model: {'; '.join(parts)} "
                          "(pass the right model_name, or let load_npz infer it)")
  for key, shape in sorted(shapes.items()):
    if flat[key].shape != tuple(shape):
      raise CheckpointError(f"{path}: {key} has shape {flat[key].shape}, the model expects "
                            f"{tuple(shape)} (pass the right model_name, or let load_npz infer it)")


def _warn_if_cropped(module: vit.VisionTransformer, height: int, width: int) -> None:
  stride = zoo.model_stride(module)
  if height % stride or width % stride:
    logging.warning("image size %dx%d is not a multiple of the model's stride %d: the last "
                    "%d x %d pixels fall outside every patch and are ignored",
                    height, width, stride, height % stride, width % stride)


def native_image_size(module: vit.VisionTransformer, params: Any) -> int:
  """Input side the params' position embedding was made for (224, 384, ...)."""
  num_tokens = params["Transformer"]["posembed_input"]["pos_embedding"].shape[1]
  side = posemb.square_grid_side(num_tokens - (module.classifier == "token"))
  return side * zoo.model_stride(module)


def load_npz(path: str, *, image_size: Optional[ImageSize] = None,
             num_classes: Optional[int] = None, model_name: Optional[str] = None,
             pre_logits: Optional[bool] = None,
             **model_overrides) -> Tuple[vit.VisionTransformer, Dict[str, Any]]:
  """Loads a released-format .npz as (module, params).

  Args:
    path: local path or tf.io.gfile URL (gs://vit_models/...).
    image_size: input side (or (h, w)) to build for; the position embedding is
      resized when it differs from the file's. None keeps the file's grid.
    num_classes: None keeps the file's head (and pre_logits). Another count
      replaces the head by a zero-initialised one (the fine-tuning setup).
    model_name: released name to build; None infers the architecture from shapes.
    pre_logits: keep the representation layer; default: keep it iff the head is kept.
    **model_overrides: other VisionTransformer attributes (dropout_rate, dtype, ...).

  Returns:
    The module and a nested dict of float32 host (numpy) arrays; place them on
    devices with jax.device_put(params, sharding).
  """
  flat = {k: np.asarray(v, np.float32) for k, v in
          npz_layout.to_released_layout(read_npz(path)).items()}
  try:
    architecture, file_classes, file_representation = npz_layout.infer_architecture(flat)
  except KeyError as e:
    raise CheckpointError(f"{path} is not a ViT checkpoint: key {e.args[0]} is missing") from None
  if model_name is not None:
    architecture = zoo.get_architecture(model_name)

  keep_head = num_classes is None or num_classes == file_classes
  if file_classes is None and num_classes is None:
    raise CheckpointError(f"{path} has no head: pass num_classes to add a new one")
  if pre_logits and file_representation is None:
    raise CheckpointError(f"{path} has no pre_logits layer to keep: pass pre_logits=False")
  keep_pre_logits = keep_head if pre_logits is None else pre_logits
  module = vit.VisionTransformer(
      num_classes=file_classes if num_classes is None else num_classes,
      representation_size=file_representation if keep_pre_logits else None,
      **{**architecture.as_kwargs(), **model_overrides})

  if not keep_pre_logits:
    flat = {k: v for k, v in flat.items() if not k.startswith("pre_logits/")}
  if not keep_head:
    flat = {k: v for k, v in flat.items() if not k.startswith("head/")}
  if POSEMB_KEY not in flat:
    raise CheckpointError(f"{path} is not a ViT checkpoint: key {POSEMB_KEY} is missing")

  file_side = native_image_size(module, {"Transformer": {"posembed_input": {
      "pos_embedding": flat[POSEMB_KEY]}}})
  height, width = _side_pair(file_side if image_size is None else image_size)
  _warn_if_cropped(module, height, width)
  shapes = expected_shapes(module.clone(scan_layers=False), (height, width))
  if not keep_head:
    flat["head/kernel"] = np.zeros(shapes["head/kernel"], np.float32)
    flat["head/bias"] = np.full(shapes["head/bias"], module.head_bias_init, np.float32)
  if flat[POSEMB_KEY].shape != shapes[POSEMB_KEY]:
    new_grid = (zoo.token_grid(module, height), zoo.token_grid(module, width))
    logging.info("resizing position embedding %s -> %s", flat[POSEMB_KEY].shape,
                 shapes[POSEMB_KEY])
    flat[POSEMB_KEY] = posemb.resize_posemb(flat[POSEMB_KEY], new_grid,
                                            module.classifier == "token")
  check_against(flat, shapes, path)
  params = traverse_util.unflatten_dict(flat, sep="/")
  return module, vit.to_scan_layout(params) if module.scan_layers else params

