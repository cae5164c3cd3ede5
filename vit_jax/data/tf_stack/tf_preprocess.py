"""Image preprocessing in TensorFlow (tf.data): decoding, the train/eval presets, MixUp.

Every function takes an image either as uint8 RGB pixels [H, W, 3] or as encoded bytes (a
scalar tf.string: JPEG, PNG, GIF or BMP), so that decoding can happen late (after a
shuffle) and a JPEG crop can decode only its window. Random choices are stateless ops
driven by an explicit `seed` (int tensor of shape [2]): an example's augmentation then
depends on the seed alone, never on thread scheduling. Outputs are float32 in [-1, 1].
RandAugment (randaugment.py, numpy) runs on the train crop's uint8 pixels.
"""

from typing import Optional, Tuple

import tensorflow as tf

from vit_jax.base.image_sizes import side_pair
from vit_jax.data import randaugment
from vit_jax.data.presets import bit_resize, INCEPTION_AREA, INCEPTION_ASPECT


# JPEGs decode with the accurate integer IDCT (TF's default is the fast one, up to 18
# levels off it): PIL's, so that the Grain loader and predict (np_preprocess) see the
# same pixels as tf.data.
JPEG_DCT = "INTEGER_ACCURATE"


def decode_image(encoded: tf.Tensor) -> tf.Tensor:
  """Encoded bytes -> uint8 [H, W, 3]; grayscale is replicated and alpha dropped."""
  image = tf.cond(
      tf.io.is_jpeg(encoded),
      lambda: tf.io.decode_jpeg(encoded, channels=3, dct_method=JPEG_DCT),
      lambda: tf.io.decode_image(encoded, channels=3, expand_animations=False))
  image.set_shape([None, None, 3])
  return image


def as_pixels(image: tf.Tensor) -> tf.Tensor:
  """uint8 RGB pixels of an image given as pixels or as encoded bytes."""
  return decode_image(image) if image.dtype == tf.string else image


def to_model_range(image: tf.Tensor) -> tf.Tensor:
  """[0, 255] -> [-1, 1], the input range of every released model."""
  return (tf.cast(image, tf.float32) - 127.5) / 127.5


def eval_resize(image: tf.Tensor, size) -> tf.Tensor:
  """Evaluation and prediction: plain bilinear resize to size x size (or to size =
  (height, width)), no crop."""
  resized = tf.image.resize(as_pixels(image), side_pair(size), method="bilinear",
                            antialias=False)
  return to_model_range(resized)


def _maybe_flip(image: tf.Tensor, seed: tf.Tensor, flip: bool) -> tf.Tensor:
  return tf.image.stateless_random_flip_left_right(image, seed) if flip else image


def rand_augment(pixels: tf.Tensor, num_layers: int, magnitude: int, seed: tf.Tensor
                 ) -> tf.Tensor:
  """vit_jax.data.randaugment's randaug(N, M) on uint8 [H, W, 3] pixels, run in numpy
  through tf.numpy_function (faster than the TensorFlow ops: docs/randaugment.md)."""
  def augment(image, words):
    return randaugment.randaugment(image, num_layers, magnitude, words)
  out = tf.numpy_function(augment, [pixels, seed], tf.uint8, stateful=False)
  out.set_shape(pixels.shape)
  return out


def finish_train(resized: tf.Tensor, seed: tf.Tensor, flip_seed: tf.Tensor, flip: bool,
                 randaug: Optional[Tuple[int, int]]) -> tf.Tensor:
  """Flip and, with randaug = (N, M), big_vision's order: the resized crop back to uint8
  (clipped, truncated), flip, RandAugment (seeded by `seed` folded with 3), [-1, 1]."""
  if not randaug:
    return to_model_range(_maybe_flip(resized, flip_seed, flip))
  pixels = tf.cast(tf.clip_by_value(resized, 0.0, 255.0), tf.uint8)
  pixels = _maybe_flip(pixels, flip_seed, flip)
  randaug_seed = tf.random.experimental.stateless_fold_in(seed, 3)
  return to_model_range(rand_augment(pixels, *randaug, randaug_seed))


def inception_window(image_shape: tf.Tensor, seed: tf.Tensor):
  """(begin [3], size [3]) of a random crop with 5-100% of the area, aspect 3/4-4/3.

  Depends only on the image's height/width and the seed, so decoding a JPEG's window
  and cropping the decoded image agree. Falls back to the whole image.
  """
  begin, size, _ = tf.image.stateless_sample_distorted_bounding_box(
      image_shape, bounding_boxes=tf.zeros([1, 0, 4]), seed=seed, min_object_covered=0.0,
      aspect_ratio_range=INCEPTION_ASPECT, area_range=INCEPTION_AREA, max_attempts=100,
      use_image_if_no_bounding_boxes=True)
  return begin, size


def _crop_jpeg(encoded: tf.Tensor, seed: tf.Tensor) -> tf.Tensor:
  """Decodes only the crop window: most of a large JPEG is never decompressed."""
  begin, size = inception_window(tf.image.extract_jpeg_shape(encoded), seed)
  window = tf.stack([begin[0], begin[1], size[0], size[1]])
  return tf.image.decode_and_crop_jpeg(encoded, window, channels=3, dct_method=JPEG_DCT)


def _crop_pixels(image: tf.Tensor, seed: tf.Tensor) -> tf.Tensor:
  begin, size = inception_window(tf.shape(image), seed)
  return tf.slice(image, begin, size)


def inception_window_pixels(image: tf.Tensor, crop_seed: tf.Tensor) -> tf.Tensor:
  """uint8 pixels of the inception window (inception_window) of pixels or encoded bytes,
  at their own size."""
  if image.dtype == tf.string:
    crop = tf.cond(tf.io.is_jpeg(image), lambda: _crop_jpeg(image, crop_seed),
                   lambda: _crop_pixels(decode_image(image), crop_seed))
    crop.set_shape([None, None, 3])
    return crop
  return _crop_pixels(image, crop_seed)


def inception_crop(image: tf.Tensor, size: int, seed: tf.Tensor, *, flip: bool = True,
                   randaug: Optional[Tuple[int, int]] = None) -> tf.Tensor:
  """Reference fine-tuning train crop: random window, bilinear resize, random flip
  (then RandAugment with randaug = (N, M): finish_train)."""
  crop_seed, flip_seed = tf.unstack(tf.random.experimental.stateless_split(seed, 2))
  crop = inception_window_pixels(image, crop_seed)
  crop = tf.image.resize(crop, [size, size], method="bilinear", antialias=False)
  return finish_train(crop, seed, flip_seed, flip, randaug)


def bit_crop(image: tf.Tensor, crop: int, seed: tf.Tensor, *, resize: int = None,
             flip: bool = True, randaug: Optional[Tuple[int, int]] = None) -> tf.Tensor:
  """BiT train preprocessing: resize to `resize` (HyperRule default), random crop, flip
  (then RandAugment with randaug = (N, M): finish_train)."""
  resize = bit_resize(crop, resize)
  crop_seed, flip_seed = tf.unstack(tf.random.experimental.stateless_split(seed, 2))
  image = tf.image.resize(as_pixels(image), [resize, resize], method="bilinear",
                          antialias=False)
  image = tf.image.stateless_random_crop(image, [crop, crop, 3], crop_seed)
  return finish_train(image, seed, flip_seed, flip, randaug)


def bit_crop_batch(images: tf.Tensor, crop: int, uniforms: tf.Tensor, *, resize: int = None,
                   flip: bool = True) -> tf.Tensor:
  """bit_crop for a batch of same-sized uint8 pixel images [B, H, W, 3] in a handful of
  batched ops (the per-example path costs the digits' demo ~7% of a 2-core CPU's step
  time): resize all, then crop and flip row b by uniforms[b] = (u_row, u_col, u_flip)
  in [0, 1), drawn by the caller per example."""
  resize = bit_resize(crop, resize)
  images = tf.image.resize(images, [resize, resize], method="bilinear", antialias=False)
  offsets = tf.cast(tf.floor(uniforms[:, :2] * (resize - crop + 1)), tf.int32)  # [B, 2]
  window = tf.range(crop)
  images = tf.gather(images, offsets[:, :1] + window, axis=1, batch_dims=1)  # rows
  images = tf.gather(images, offsets[:, 1:] + window, axis=2, batch_dims=1)  # columns
  if flip:
    mirrored = uniforms[:, 2] < 0.5
    images = tf.where(mirrored[:, None, None, None], tf.reverse(images, axis=[2]), images)
  return to_model_range(images)


def _swap_pairs(x: tf.Tensor) -> tf.Tensor:
  """Rows (0, 1), (2, 3), ... exchanged: the batch reversed within pairs."""
  pairs = tf.reshape(x, tf.concat([[-1, 2], tf.shape(x)[1:]], axis=0))
  return tf.reshape(tf.reverse(pairs, axis=[1]), tf.shape(x))


def mixup(images: tf.Tensor, labels: tf.Tensor, alpha: float, seed: tf.Tensor):
  """BiT MixUp: one lambda ~ Beta(alpha, alpha) per batch, each row mixed with a partner.

  BiT's partner is the row at the mirrored position of the reversed batch; here it is
  the row's neighbour (rows 2i and 2i+1 are partners), the same thing for a batch in
  random order, but local: every even-sized slice of a batch mixes exactly as the whole
  batch does, so a process's part of a global batch needs no other process's rows.
  `labels` are one-hot float [B, K]; returns (images, soft labels). B must be even.
  """
  gammas = tf.random.stateless_gamma([2], seed, alpha=alpha, dtype=tf.float64)
  lam = tf.cast(gammas[0] / (gammas[0] + gammas[1]), tf.float32)
  mixed_images = lam * images + (1 - lam) * _swap_pairs(images)
  mixed_labels = lam * labels + (1 - lam) * _swap_pairs(labels)
  return mixed_images, mixed_labels
