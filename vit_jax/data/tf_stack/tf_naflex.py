"""NaFlex preprocessing in TensorFlow (config.pp.max_patches with the tf.data loader): each
image at its own aspect ratio in at most max_patches patches, as big_vision's
pp/proj/image_text/ops_naflex.py reads it (resize_to_sequence, then patchify): the scale
bisected in float32, each side rounded up to whole patches (at least one),
tf.image.resize's antialiased bilinear filter on float pixels (no rounding to uint8),
[-1, 1], patches flattened (row, column, channel) and padded with zeros to the budget.

The Grain loader's NaFlex (grain_stack/grain_naflex.py) is transformers' reading instead (PIL
on uint8): pixels within one level of these, and the same grid except where big_vision's
float32 bisection lets one more column (or row) through (docs/siglip_classifiers.md).

Train crops are the preset's window at its own size (inception: 5-100% of the area,
aspect 3/4-4/3, as tf_preprocess draws it; bit: the share crop/resize of each side at a
random offset), never squashed to a square, then resized as above; flip and RandAugment
follow (tf_preprocess.finish_train)."""

from typing import Dict

import tensorflow as tf

from vit_jax.data import presets
from vit_jax.data.tf_stack import tf_preprocess

# The bisection's bounds and stop (big_vision's: eps / 10, 100, eps = 1e-5).
_LOW, _HIGH, _EPS = 1e-6, 100.0, 1e-5


def _sides(size: tf.Tensor, scale: tf.Tensor, patch: int) -> tf.Tensor:
  """int32 sides: size * scale rounded up to whole patches, at least one patch."""
  return tf.cast(tf.maximum(patch * tf.math.ceil(size * scale / patch), patch), tf.int32)


def target_size(height_width: tf.Tensor, patch: int, max_patches: int) -> tf.Tensor:
  """int32 [2]: the sides (multiples of patch) of the largest scale whose patch grid fits
  max_patches, bisected in float32 as big_vision does (which counts the patches in float64)."""
  size = tf.cast(height_width, tf.float32)

  def halve(low, high):
    middle = (low + high) / 2
    # Counted in int64: a big photo's grid at the first scales overflows int32.
    grid = tf.cast(_sides(size, middle, patch) // patch, tf.int64)
    fits = tf.reduce_prod(grid) <= max_patches
    return tf.where(fits, middle, low), tf.where(fits, high, middle)

  low, _ = tf.while_loop(lambda low, high: high - low >= _EPS, halve,
                         (tf.constant(_LOW), tf.constant(_HIGH)))
  return _sides(size, low, patch)


def resize(pixels: tf.Tensor, patch: int, max_patches: int) -> tf.Tensor:
  """float32 [h, w, 3] in [0, 255] of uint8 (or float) pixels at target_size."""
  size = target_size(tf.shape(pixels)[:2], patch, max_patches)
  return tf.image.resize(tf.cast(pixels, tf.float32), size, method="bilinear", antialias=True)


def cut(image: tf.Tensor, patch: int, max_patches: int) -> Dict[str, tf.Tensor]:
  """{'patches': [max_patches, patch*patch*3] (zeros past the image's), 'mask' int32
  [max_patches] (1: a real patch), 'grid' int32 [2] (rows, columns)} of an image whose
  sides are multiples of patch."""
  grid = tf.image.extract_patches(image[None], sizes=[1, patch, patch, 1],
                                  strides=[1, patch, patch, 1], rates=[1, 1, 1, 1],
                                  padding="VALID")[0]
  rows, cols = tf.shape(grid)[0], tf.shape(grid)[1]
  count = rows * cols
  patches = tf.pad(tf.reshape(grid, [count, patch * patch * 3]),
                   [[0, max_patches - count], [0, 0]])
  return {"patches": tf.ensure_shape(patches, [max_patches, patch * patch * 3]),
          "mask": tf.cast(tf.range(max_patches) < count, tf.int32),
          "grid": tf.stack([rows, cols])}


def eval_patches(image: tf.Tensor, patch: int, max_patches: int) -> Dict[str, tf.Tensor]:
  """Evaluation: the whole image (pixels or encoded bytes), resized and cut."""
  resized = resize(tf_preprocess.as_pixels(image), patch, max_patches)
  return cut(tf_preprocess.to_model_range(resized), patch, max_patches)


def _train_window(image: tf.Tensor, seed: tf.Tensor, pp) -> tf.Tensor:
  """uint8 pixels of the preset's random window, at its own size."""
  if pp.preset == "inception":
    return tf_preprocess.inception_window_pixels(image, seed)
  pixels = tf_preprocess.as_pixels(image)
  fraction = presets.bit_side_fraction(pp.crop, pp.resize)
  sides = tf.cast(tf.floor(tf.cast(tf.shape(pixels)[:2], tf.float32) * fraction + 0.5), tf.int32)
  return tf.image.stateless_random_crop(pixels, tf.concat([tf.maximum(sides, 1), [3]], 0), seed)


def train_patches(image: tf.Tensor, seed: tf.Tensor, pp, patch: int) -> Dict[str, tf.Tensor]:
  """Training: the preset's window (seeded as tf_preprocess's crops), resized at its
  aspect ratio, flipped and RandAugmented as pp says, cut."""
  crop_seed, flip_seed = tf.unstack(tf.random.experimental.stateless_split(seed, 2))
  resized = resize(_train_window(image, crop_seed, pp), patch, pp.max_patches)
  image = tf_preprocess.finish_train(resized, seed, flip_seed, pp.flip, pp.get("randaug"))
  return cut(image, patch, pp.max_patches)
