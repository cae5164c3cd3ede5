"""NaFlex preprocessing (SigLIP 2): an image resized at its own aspect ratio to the largest
patch grid within a budget (config.pp.max_patches: 256, 576, 1024 ...), cut into patches
flattened (row, column, channel), padded to the budget, with the mask of its real patches
and its grid: the inputs of vit_jax.families.vit.naflex_model. numpy and PIL only, so that
the Grain stack (grain_stack/grain_naflex.py: its train and eval transforms), predict and
exported models' clients share one reading; values as transformers' Siglip2ImageProcessor
gives them (PIL's bilinear resize of the uint8 image, then [-1, 1]). The tf.data stack's
reading is big_vision's (tf_stack/tf_naflex.py)."""

import math
from typing import Optional, Sequence, Tuple

import numpy as np
from PIL import Image

from vit_jax.base import errors

# The scale is bisected between these bounds until they are this close (as the processors).
_SCALE_RANGE, _SCALE_EPS = (1e-6, 100.0), 1e-5


def _side(size: int, scale: float, patch: int) -> int:
  return max(patch, math.ceil(size * scale / patch) * patch)


def target_size(height: int, width: int, patch: int, max_patches: int) -> Tuple[int, int]:
  """(height, width) in pixels, multiples of patch, of the largest scaled image whose
  grid of patches fits max_patches (each side at least one patch)."""
  if max_patches < 1 or patch < 1:
    raise errors.InvalidInput(f"max_patches={max_patches} and patch size {patch} must be >= 1")
  low, high = _SCALE_RANGE
  while high - low >= _SCALE_EPS:
    scale = (low + high) / 2
    patches = (_side(height, scale, patch) // patch) * (_side(width, scale, patch) // patch)
    low, high = (scale, high) if patches <= max_patches else (low, scale)
  return _side(height, low, patch), _side(width, low, patch)


def most_patches(height: int, width: int, patch: int) -> int:
  """The most patches any budget gives an image: its grid at the top of the scale range
  (each side up to 100 times its pixels, as the processors bisect). A budget past the
  image's own pixels still changes its reading (it is upsampled to fill the budget, as
  transformers' processor does); a budget past this only adds masked padding."""
  top = _SCALE_RANGE[1]
  return (_side(height, top, patch) // patch) * (_side(width, top, patch) // patch)


def sequence_length(sizes: Sequence[Tuple[int, int]], patch: int, max_patches: int) -> int:
  """The padded length that images of these (height, width) sizes need in one batch at
  this budget: max_patches, or less where none of them can fill it (most_patches): the
  same real patches and outputs, without the padding's memory (attention is quadratic in
  it)."""
  return min(max_patches, max(most_patches(h, w, patch) for h, w in sizes))


def resize(image: np.ndarray, patch: int, max_patches: int) -> np.ndarray:
  """uint8 [H, W, 3] -> uint8 [h, w, 3] at target_size: PIL's bilinear resize (antialiased
  when it shrinks), rounded to uint8, as transformers' processor."""
  image = np.asarray(image)
  if image.ndim != 3 or image.shape[-1] != 3 or image.dtype != np.uint8:
    raise errors.InvalidInput(f"NaFlex takes uint8 RGB images [H, W, 3], got {image.dtype} "
                              f"{image.shape}")
  height, width = target_size(image.shape[0], image.shape[1], patch, max_patches)
  return np.asarray(Image.fromarray(image).resize((width, height), Image.BILINEAR))


def cut(pixels: np.ndarray, patch: int, max_patches: int
        ) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
  """[h, w, 3] (sides multiples of patch) -> (patches [max_patches, patch*patch*3] of its
  dtype, zeros past the image's, mask [max_patches] int32 (1: a real patch), grid [2]
  int32 (rows, columns)); max_patches here is the padded length (at least the image's)."""
  rows, cols = pixels.shape[0] // patch, pixels.shape[1] // patch
  patches = pixels.reshape(rows, patch, cols, patch, 3).transpose(0, 2, 1, 3, 4)
  padded = np.zeros((max_patches, patch * patch * 3), pixels.dtype)
  padded[:rows * cols] = patches.reshape(rows * cols, -1)
  mask = (np.arange(max_patches) < rows * cols).astype(np.int32)
  return padded, mask, np.asarray([rows, cols], np.int32)


def model_range(pixels: np.ndarray) -> np.ndarray:
  """uint8 -> float32 in [-1, 1] as the processor computes it (rescale, then normalise
  with mean and std 0.5)."""
  return (np.asarray(pixels, np.float32) / np.float32(255.0) - np.float32(0.5)) / np.float32(0.5)


def patchify(image: np.ndarray, patch: int, max_patches: int, length: Optional[int] = None
             ) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
  """uint8 image [H, W, 3] -> (patches [length, patch*patch*3] float32 in [-1, 1], mask
  [length] int32 (1: a real patch), grid [2] int32 (rows, columns)); length: the padded
  length, max_patches unless given (sequence_length: what a batch of images needs)."""
  return cut(model_range(resize(image, patch, max_patches)), patch, length or max_patches)

