"""RandAugment in TensorFlow graph ops, for the tf.data pipeline: randaugment.py's ops
without the GIL.

The numpy module stays the definition (the TensorFlow-free loader calls it); this one
reuses its tables, index maps, levels and per-layer draws (computed in numpy: the tables
and maps once per trace, the draws per image through a small tf.numpy_function, so both
paths draw the same ops for the same seed) and repeats in TensorFlow only what depends on
the pixels: AutoContrast, Equalize, Color, Contrast's mean, Sharpness, Cutout's square.
Their float arithmetic follows the numpy ops step by step (Sharpness's fused multiply-adds
included), and tests/data/test_randaugment_tf.py holds the two equal op by op.
"""

from typing import Tuple

import numpy as np
import tensorflow as tf

from vit_jax.data import randaugment as ra

_F32 = np.float32


def _blend(degenerate: tf.Tensor, image: tf.Tensor, factor: float) -> tf.Tensor:
  """randaugment._blend in float32 TensorFlow ops."""
  if factor == 0.0:
    return degenerate
  if factor == 1.0:
    return image
  low = tf.cast(degenerate, tf.float32)
  temp = low + tf.constant(_F32(factor)) * (tf.cast(image, tf.float32) - low)
  if not 0.0 < factor < 1.0:
    temp = tf.clip_by_value(temp, 0.0, 255.0)
  return tf.cast(temp, tf.uint8)


def _lut(image: tf.Tensor, table) -> tf.Tensor:
  return tf.gather(table, tf.cast(image, tf.int32))


def _grey(image: tf.Tensor) -> tf.Tensor:
  """randaugment._grey: uint8 [H, W]."""
  unit = tf.cast(image, tf.float32) * tf.constant(_F32(1.0 / 255.0))
  weighted = (unit[..., 0] * tf.constant(_F32(0.2989)) + unit[..., 1] * tf.constant(_F32(0.5870))
              + unit[..., 2] * tf.constant(_F32(0.1140)))
  return tf.cast(weighted * tf.constant(_F32(255.5)), tf.uint8)


def _autocontrast(image: tf.Tensor) -> tf.Tensor:
  channels = []
  for c in range(3):
    channel = image[..., c]
    lo = tf.cast(tf.reduce_min(channel), tf.float32)
    hi = tf.cast(tf.reduce_max(channel), tf.float32)

    def stretch(channel=channel, lo=lo, hi=hi):
      scale = tf.constant(_F32(255.0)) / (hi - lo)
      table = tf.range(256, dtype=tf.float32) * scale + (-lo * scale)
      return _lut(channel, tf.cast(tf.clip_by_value(table, 0.0, 255.0), tf.uint8))
    channels.append(tf.cond(hi > lo, stretch, lambda channel=channel: channel))
  return tf.stack(channels, axis=-1)


def _equalize(image: tf.Tensor) -> tf.Tensor:
  channels = []
  for c in range(3):
    channel = tf.cast(image[..., c], tf.int32)
    histogram = tf.math.bincount(channel, minlength=256, maxlength=256)
    nonzero = tf.boolean_mask(histogram, histogram != 0)
    step = (tf.reduce_sum(nonzero) - nonzero[-1]) // 255

    def spread(channel=channel, histogram=histogram, step=step):
      table = (tf.cumsum(histogram) + step // 2) // step
      table = tf.clip_by_value(tf.concat([[0], table[:-1]], 0), 0, 255)
      return tf.gather(table, channel)
    channels.append(tf.cast(tf.cond(step == 0, lambda channel=channel: channel, spread),
                            tf.uint8))
  return tf.stack(channels, axis=-1)


def _color(image: tf.Tensor, factor: float) -> tf.Tensor:
  return _blend(tf.repeat(_grey(image)[..., None], 3, axis=-1), image, factor)


def _contrast(image: tf.Tensor, factor: float) -> tf.Tensor:
  grey = _grey(image)
  total = tf.cast(tf.reduce_sum(tf.cast(grey, tf.int64)), tf.float32)
  mean = total / tf.cast(tf.size(grey), tf.float32)
  level = tf.cast(tf.clip_by_value(mean, 0.0, 255.0), tf.int32)
  tables = np.stack([ra.contrast_table(d, factor) for d in range(256)])  # by mean level
  return _lut(image, tf.gather(tf.constant(tables), level))


def _sharpness(image: tf.Tensor, factor: float) -> tf.Tensor:
  """randaugment._sharpness: float32 fused multiply-adds emulated exactly in float64."""
  if factor == 1.0:
    return image
  height, width = image.shape[0], image.shape[1]
  pixels = tf.cast(image, tf.float64)
  side, centre = _F32(1.0) / _F32(13.0), _F32(5.0) / _F32(13.0)
  smooth = tf.zeros([height - 2, width - 2, 3], tf.float32)
  for dy in range(3):
    for dx in range(3):
      weight = np.float64(centre if (dy, dx) == (1, 1) else side)
      window = pixels[dy:dy + height - 2, dx:dx + width - 2]
      smooth = tf.cast(weight * window + tf.cast(smooth, tf.float64), tf.float32)
  inner = tf.cast(tf.clip_by_value(smooth, 0.0, 255.0), tf.uint8)
  border = tf.pad(tf.ones_like(inner, tf.bool), [[1, 1], [1, 1], [0, 0]])
  degenerate = tf.where(border, tf.pad(inner, [[1, 1], [1, 1], [0, 0]]), image)
  return _blend(degenerate, image, factor)


def _cutout(image: tf.Tensor, pad: int, row: tf.Tensor, column: tf.Tensor) -> tf.Tensor:
  rows = tf.range(image.shape[0], dtype=row.dtype)[:, None]
  columns = tf.range(image.shape[1], dtype=column.dtype)[None, :]
  square = ((rows >= tf.maximum(row - pad, 0)) & (rows < row + pad)
            & (columns >= tf.maximum(column - pad, 0)) & (columns < column + pad))
  return tf.where(square[..., None], tf.constant(ra.FILL, tf.uint8), image)


class _Ops:
  """The 16 ops at one magnitude for images of one (static) size; the tables and index
  maps are built in numpy, once, and shared by every layer."""

  def __init__(self, level: float, height: int, width: int):
    self.level, self.height, self.width = level, height, width
    self.constants = {}

  def constant(self, name: str) -> tf.Tensor:
    """An op's table, or its index maps [2, H x W] (sign +, sign -), made on first use."""
    if name not in self.constants:
      if name in ra.POINTWISE:
        value = ra.pointwise_table(name, self.level)
      else:
        value = np.stack([ra.source_index(name, self.level, negate, self.height, self.width)
                          .ravel() for negate in (False, True)]).astype(np.int32)
      self.constants[name] = tf.constant(value)
    return self.constants[name]

  def apply(self, image: tf.Tensor, name: str, negate: tf.Tensor,
            centre: Tuple[tf.Tensor, tf.Tensor]) -> tf.Tensor:
    if name in ra.POINTWISE:
      return _lut(image, self.constant(name))
    if name in ra.GEOMETRIC:
      grey = tf.fill([1, 3], tf.constant(ra.FILL, tf.uint8))
      pixels = tf.concat([tf.reshape(image, [-1, 3]), grey], 0)
      flat = tf.gather(self.constant(name), tf.cast(negate, tf.int32))
      return tf.reshape(tf.gather(pixels, flat), tf.shape(image))
    if name == "AutoContrast":
      return _autocontrast(image)
    if name == "Equalize":
      return _equalize(image)
    if name == "Cutout":
      return _cutout(image, ra.cutout_pad(self.level), *centre)
    enhance = {"Color": _color, "Contrast": _contrast, "Sharpness": _sharpness}[name]
    return enhance(image, ra.enhance_factor(self.level))


def _static_size(image: tf.Tensor) -> Tuple[int, int]:
  height, width = image.shape[0], image.shape[1]
  if height is None or width is None or image.dtype != tf.uint8:
    raise ValueError(f"RandAugment's graph ops take uint8 [H, W, 3] pixels of a static size, "
                     f"not {image.dtype.name} {image.shape}")
  return height, width


def apply_op(image: tf.Tensor, name: str, magnitude: float, negate=False,
             centre: Tuple[int, int] = (0, 0)) -> tf.Tensor:
  """randaugment._apply in graph ops (for tests and comparisons)."""
  ops = _Ops(float(magnitude), *_static_size(image))
  return ops.apply(image, name, tf.constant(negate),
                   tuple(tf.constant(c, tf.int64) for c in centre))


def randaugment(image: tf.Tensor, num_layers: int, magnitude: float, seed: tf.Tensor
                ) -> tf.Tensor:
  """randaugment.randaugment in graph ops: the same draws (randaugment.layer_draws of
  `seed`), so the same output."""
  height, width = _static_size(image)
  if num_layers == 0:
    return image
  draws = tf.numpy_function(
      lambda words: ra.layer_draws(words, num_layers, height, width), [seed], tf.int64,
      stateful=False)
  draws.set_shape([num_layers, 4])
  ops = _Ops(float(magnitude), height, width)
  for name in ra.POINTWISE + ra.GEOMETRIC:  # outside the branches, which every layer shares
    ops.constant(name)
  for layer in range(num_layers):
    op, negate, row, column = tf.unstack(draws[layer])
    branches = [lambda name=name, image=image: ops.apply(image, name, negate, (row, column))
                for name in ra.OPS]
    image = tf.switch_case(tf.cast(op, tf.int32), branches)
    image.set_shape([height, width, 3])
  return image
