"""What a released-layout checkpoint must satisfy before it is loaded, whatever its family
(vit_jax.checkpoints.npz): the model's parameter shapes, an image size the model can run,
finite weights."""

import collections
import functools
import logging
import math
import re
from typing import Any, Dict, List, Optional, Tuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import traverse_util

from vit_jax.base import errors
from vit_jax.base.image_sizes import (ImageSize, ImageSizeError, nearest_multiples,
                                      side_pair, size_text)
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


def most_common_size(flat: Dict[str, np.ndarray], places: List[Tuple[str, int]]) -> int:
  """The size most of the arrays at `places` (key, axis) have there (ties: the first): what
  a loader reads a width off, so that an edited or damaged array is the one check_against
  names, not the intact arrays that disagree with it."""
  sizes = [flat[key].shape[axis] for key, axis in places
           if key in flat and np.ndim(flat[key]) > max(axis, -axis - 1)]
  return collections.Counter(sizes).most_common(1)[0][0]


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
    hint = (f"is it a {model_name}? pass the right model_name, or load it without one "
            "(load_npz, convert) to infer it from the file")
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


def check_image_size(module, image_size: ImageSize, *, strict: bool = False,
                     grid_multiple: Optional[Tuple[int, int]] = None) -> None:
  """Raises ImageSizeError for sizes that give no token or more than MAX_TOKENS, and with
  strict=True for a side that is not a multiple of the model's stride (else that only
  warns, saying what the model does with the remainder: drops it, as fine-tuning H/14 at
  384 px does by design, or pads it with zeros, as SAME-padded convolutions do).

  grid_multiple: (rows, columns) the token grid must be whole multiples of, from the
  family's loader when its weights are tied to the file's grid; the sizes offered instead
  are then whole multiples of that grid's pixels."""
  height, width = side_pair(image_size)
  stride, size = family_registry.stride(module), size_text(height, width)
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
  multiple = grid_multiple or (1, 1)
  steps = (multiple[0] * stride, multiple[1] * stride)
  instead = " or ".join(nearest_multiples(height, width, steps, max_side)) or (
      f"a multiple of {size_text(*steps)}")
  if grid[0] % multiple[0] or grid[1] % multiple[1]:
    raise ImageSizeError(
        f"image size {size} gives a {grid[0]}x{grid[1]} token grid, but the model's weights "
        f"are tied to a {multiple[0]}x{multiple[1]} grid and take whole multiples of it only "
        f"({size_text(*steps)} px, twice that, ...): use {instead}")
  ragged = height % stride or width % stride
  if ragged and strict:
    raise ImageSizeError(f"image size {size} is not a multiple of the model's stride "
                         f"{stride} px: use {instead}")
  if ragged:
    logging.warning("image size %s is not a multiple of the model's stride %d: %s", size,
                    stride, _remainder(height, width, grid, stride))


def _remainder(height: int, width: int, grid: Tuple[int, int], stride: int) -> str:
  """What the tokens do with the pixels past the last whole stride, per the family's
  token_grid: fewer tokens than the sides cover drop them, more pad them with zeros."""
  cut = [max(0, side - tokens * stride) for side, tokens in zip((height, width), grid)]
  pad = [max(0, tokens * stride - side) for side, tokens in zip((height, width), grid)]
  said = []
  if any(cut):
    said.append(f"the last {cut[0]} x {cut[1]} pixels fall outside every patch and are "
                "ignored")
  if any(pad):
    said.append(f"its {grid[0]} x {grid[1]} tokens cover {grid[0] * stride} x "
                f"{grid[1] * stride} pixels: {pad[0]} x {pad[1]} of them are zero padding"
                + ("" if any(cut) else " (nothing is ignored)"))
  return "; ".join(said)


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
