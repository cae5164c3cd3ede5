"""What a released-layout checkpoint must satisfy before it is loaded, whatever its family
(vit_jax.checkpoints.npz): the model's parameter shapes, an image size the model can run,
finite weights."""

import functools
import logging
import math
import re
from typing import Any, Dict, Optional, Tuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import traverse_util

from vit_jax.base import errors
from vit_jax.base.image_sizes import ImageSize, ImageSizeError, side_pair
from vit_jax.models import family_registry


class CheckpointError(errors.InvalidInput):
  """A checkpoint that cannot be used; the message is one line naming problem and fix."""


def expected_shapes(module, image_size: ImageSize) -> Dict[str, tuple]:
  """Flat parameter shapes of `module` at `image_size`, without allocating anything.

  Tracing the model for them takes 0.3-0.8 s (ViT-Ti to ViT-L), so it is done once per
  module and size in a process: loading a checkpoint again, as each export does, traces
  nothing (unless an attribute is unhashable, a list)."""
  size = side_pair(image_size)
  try:
    hash(module)
  except TypeError:
    return _traced_shapes(module, size)
  return dict(_cached_shapes(module, size))


def _traced_shapes(module, size: Tuple[int, int]) -> Dict[str, tuple]:
  shapes = jax.eval_shape(module.init, jax.random.PRNGKey(0),
                          jnp.zeros((1, *size, 3), jnp.float32))
  return {k: v.shape for k, v in traverse_util.flatten_dict(shapes["params"], sep="/").items()}


_cached_shapes = functools.lru_cache(maxsize=32)(_traced_shapes)


def _list(keys) -> str:
  keys = sorted(keys)
  shown = ", ".join(keys[:6])
  return shown + (f" (+{len(keys) - 6} more)" if len(keys) > 6 else "")


def check_against(flat: Dict[str, np.ndarray], shapes: Dict[str, tuple], path: str,
                  model_name: Optional[str] = None) -> None:
  """Raises CheckpointError on missing/extra keys or the first shape mismatch."""
  if model_name is None:
    hint = ("the file's arrays do not fit the architecture its shapes imply: it is damaged, "
            "edited or of an unsupported layout")
  else:
    hint = f"is it a {model_name}? pass the right model_name, or none to infer it from the file"
  missing, extra = set(shapes) - set(flat), set(flat) - set(shapes)
  if missing or extra:
    parts = ([f"missing {_list(missing)}"] if missing else []) + (
        [f"unexpected {_list(extra)}"] if extra else [])
    raise CheckpointError(f"{path} does not fit the model: {'; '.join(parts)} ({hint})")
  for key, shape in sorted(shapes.items()):
    if flat[key].shape != tuple(shape):
      raise CheckpointError(f"{path}: {key} has shape {flat[key].shape}, the model expects "
                            f"{tuple(shape)} ({hint})")


# Most patch tokens an image may give: a 128 x 128 grid (2048 px at stride 16, 4096 px at
# the hybrids' 32). Attention scores grow with the square of the token count: at this bound
# one image's float32 scores take 16384^2 * 4 B = 1 GiB per head and layer, 12 GiB for
# ViT-B's 12 heads in the explicit softmax that introspection uses, about one accelerator's
# memory. Released models run at 14^2 to 37^2 tokens, far below.
MAX_TOKENS = 128 * 128


def _size_text(height: int, width: int) -> str:
  return str(height) if height == width else f"{height}x{width}"


def check_image_size(module, image_size: ImageSize, *,
                     strict: bool = False) -> None:
  """Raises ImageSizeError for sizes that give no token or more than MAX_TOKENS, and with
  strict=True for a side that is not a multiple of the model's stride (else that only
  warns: the remainder is dropped, as fine-tuning H/14 at 384 px does by design)."""
  height, width = side_pair(image_size)
  stride, size = family_registry.stride(module), _size_text(height, width)
  grid = family_registry.token_grid(module, height), family_registry.token_grid(module, width)
  max_side = math.isqrt(MAX_TOKENS) * stride
  if min(height, width) < 1 or min(grid) < 1:
    raise ImageSizeError(f"image size {size} is smaller than the model's {stride} px patches "
                         f"(no token): use {stride} or a larger multiple of {stride}")
  if grid[0] * grid[1] > MAX_TOKENS:
    raise ImageSizeError(
        f"image size {size} gives {grid[0]}x{grid[1]} = {grid[0] * grid[1]:,} tokens, over the "
        f"limit of {MAX_TOKENS:,} (attention memory grows with their square): use at most "
        f"{max_side} px")
  ragged = [side for side in (height, width) if side % stride]
  if ragged and strict:
    lower = ragged[0] // stride * stride
    nearest = [str(s) for s in (lower, lower + stride) if 0 < s <= max_side]
    raise ImageSizeError(f"image size {size} is not a multiple of the model's stride "
                         f"{stride} px: use {' or '.join(nearest)}")
  if ragged:
    logging.warning("image size %s is not a multiple of the model's stride %d: the last "
                    "%d x %d pixels fall outside every patch and are ignored",
                    size, stride, height % stride, width % stride)


def _nonfinite_counts(value: np.ndarray) -> str:
  nans = int(np.isnan(value).sum())
  infs = int(np.isinf(value).sum())
  return ", ".join(f"{count} {what}" for count, what in ((nans, "NaN"), (infs, "Inf")) if count)


def nonfinite_arrays(flat: Dict[str, np.ndarray]) -> Optional[str]:
  """'N of M arrays: key (counts), ...' for arrays holding NaN/Inf; None if all finite."""
  bad = [key for key, value in sorted(flat.items()) if not np.isfinite(value).all()]
  if not bad:
    return None
  shown = ", ".join(f"{key} ({_nonfinite_counts(flat[key])})" for key in bad[:3])
  more = f" (+{len(bad) - 3} more)" if len(bad) > 3 else ""
  return f"{len(bad)} of {len(flat)} arrays: {shown}{more}"


def check_finite(flat: Dict[str, np.ndarray], path: str) -> None:
  """NaN/Inf weights give NaN outputs and losses far from their cause: refuse them here,
  naming the first arrays that hold them."""
  bad = nonfinite_arrays(flat)
  if bad:
    raise CheckpointError(
        f"{path} has NaN/Inf weights in {bad}; the "
        "file is damaged or saved from a diverged run: use another checkpoint, or load it "
        "anyway with allow_nonfinite=True (commands: --allow_nonfinite; training: "
        "--config.allow_nonfinite_pretrained=True)")


def describe(flat: Dict[str, Any], limit: int = 6) -> str:
  """What a file holds, for messages about one that is no ViT: its top-level names with
  their array counts, e.g. 'Transformer/ (150 arrays), head/ (2 arrays), cls' (PyTorch
  names split at the first '.')."""
  groups: Dict[str, int] = {}
  for key in flat:
    parts = re.split(r"([/.])", key, maxsplit=1)
    top, sep = parts[0], parts[1] if len(parts) > 1 else ""
    groups[top + sep] = groups.get(top + sep, 0) + 1
  names = sorted(groups)
  shown = [f"{name} ({groups[name]} arrays)" if name.endswith(("/", ".")) else name
           for name in names[:limit]]
  more = f" (+{len(names) - limit} more)" if len(names) > limit else ""
  return ", ".join(shown) + more if shown else "no arrays"
