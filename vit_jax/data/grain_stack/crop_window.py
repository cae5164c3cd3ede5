"""The inception crop's window, drawn as TensorFlow's sample_distorted_bounding_box draws
it (the tf.data loader's sampler) with the preset's ranges (vit_jax.data.presets), in
numpy for the Grain loader.

TensorFlow's kernel (sample_distorted_bounding_box_op.cc), with an empty box list and
min_object_covered=0: each attempt draws an aspect ratio a uniformly, takes the integer
heights between round(sqrt(min_area / a)) and round(sqrt(max_area / a)) (capped so
that the rounded width and the height fit), draws one of them uniformly, sets the width
to round(height x a), nudges the height by one when rounding pushed the area outside the
range, and rejects what still misses it; the offsets are uniform over [0, H - h) and
[0, W - w) (the last offset is never drawn), and after `attempts` rejections the window
is the whole image. The arithmetic is float32 with round-half-to-even (lrintf) as there.
The attempts are drawn all at once (independent draws, so the first accepted one has the
sequential loop's distribution); the draws themselves are numpy's, not TF's Philox.
"""

from typing import Tuple

import numpy as np

from vit_jax.data.presets import INCEPTION_AREA, INCEPTION_ASPECT, INCEPTION_ATTEMPTS

_F32 = np.float32


def _round(values) -> np.ndarray:
  """lrintf: round half to even, as an integer."""
  return np.rint(values).astype(np.int64)


def _max_heights(max_area: np.float32, aspects: np.ndarray, width: int, height: int):
  """The largest height of each attempt whose rounded width fits (TensorFlow's fix-up
  for widths that round past the image), capped at the image's height."""
  max_h = _round(np.sqrt(max_area / aspects))
  too_wide = _round(max_h.astype(_F32) * aspects) > width
  fitted = ((width + 0.5 - np.float64(_F32(1e-7))) / aspects.astype(np.float64)).astype(np.int64)
  fitted -= _round(fitted.astype(_F32) * aspects) > width
  return np.minimum(np.where(too_wide, fitted, max_h), height)


def _widths(heights: np.ndarray, aspects: np.ndarray) -> np.ndarray:
  return _round(heights.astype(_F32) * aspects)


def inception_window(height: int, width: int, rng: np.random.Generator
                     ) -> Tuple[int, int, int, int]:
  """(top, left, crop height, crop width) of a window with INCEPTION_AREA of the area and
  width / height in INCEPTION_ASPECT, drawn as tf.image.sample_distorted_bounding_box does
  (up to INCEPTION_ATTEMPTS draws, else the whole image)."""
  low, high = _F32(INCEPTION_ASPECT[0]), _F32(INCEPTION_ASPECT[1])
  aspects = rng.random(INCEPTION_ATTEMPTS, dtype=_F32) * (high - low) + low
  min_area = _F32(_F32(INCEPTION_AREA[0]) * _F32(width)) * _F32(height)
  max_area = _F32(_F32(INCEPTION_AREA[1]) * _F32(width)) * _F32(height)
  max_h = _max_heights(max_area, aspects, width, height)
  heights = np.minimum(_round(np.sqrt(min_area / aspects)), max_h)
  heights += np.floor(rng.random(INCEPTION_ATTEMPTS) * (max_h - heights + 1)).astype(np.int64)
  widths = _widths(heights, aspects)
  small = (widths * heights).astype(_F32) < min_area
  heights += small
  widths = np.where(small, _widths(heights, aspects), widths)
  large = (widths * heights).astype(_F32) > max_area
  heights -= large
  widths = np.where(large, _widths(heights, aspects), widths)
  areas = (widths * heights).astype(_F32)
  valid = ((areas >= min_area) & (areas <= max_area) & (widths <= width) & (heights <= height)
           & (widths > 0) & (heights > 0))
  if not valid.any():
    return 0, 0, height, width
  first = int(np.argmax(valid))
  crop_h, crop_w = int(heights[first]), int(widths[first])
  top = int(rng.integers(height - crop_h)) if crop_h < height else 0
  left = int(rng.integers(width - crop_w)) if crop_w < width else 0
  return top, left, crop_h, crop_w
