"""Image preprocessing without TensorFlow: the Grain loader's (and `predict`'s) decoding,
the train/eval presets and MixUp (their settings, which both loaders share:
vit_jax.data.presets).

The operations are those of tf_preprocess.py (tf.data), in C where it counts (image_codec:
libjpeg-turbo, OpenCV): bilinear resizes use TensorFlow's half-pixel-centre sampling
without antialiasing, so evaluation pixels agree with the tf.data path's within a level;
the inception window is drawn as TensorFlow draws it (crop_window), and a JPEG crop far
larger than the output decodes at a DCT scale (train only). Random choices come from a
numpy Generator the caller seeds per example (order.example_rng), so an example's
augmentation depends on the seed and its stream position alone. Outputs are float32 in
[-1, 1], or uint8 pixels (*_pixels) for a loader that scales whole batches.
"""

from typing import Optional, Tuple

import numpy as np

from vit_jax.base.image_sizes import side_pair
from vit_jax.data import randaugment
from vit_jax.data.grain_stack import crop_window, image_codec
from vit_jax.data.presets import bit_resize


def decode_image(encoded: bytes) -> np.ndarray:
  """Encoded bytes (JPEG, PNG, GIF, BMP) -> uint8 [H, W, 3]; grayscale is replicated and
  alpha dropped, as tf.io.decode_image(channels=3) does."""
  return image_codec.decode(bytes(encoded))


def to_model_range(image: np.ndarray) -> np.ndarray:
  """[0, 255] -> [-1, 1], the input range of every released model."""
  image = np.asarray(image)
  if image.dtype == np.uint8:
    return image_codec.model_range(image)
  return (np.ascontiguousarray(image, np.float32) - 127.5) / 127.5


def resize_bilinear(image: np.ndarray, size) -> np.ndarray:
  """float32 [h, w, C] bilinear resize of [H, W, C] to size (a side or (height, width)):
  tf.image.resize's values (half-pixel sampling, no antialiasing; image_codec.resize)."""
  return image_codec.resize(np.asarray(image, np.float32), side_pair(size))


def eval_resize(image, size) -> np.ndarray:
  """Evaluation and prediction: plain bilinear resize to size x size (or to size =
  (height, width)), no crop."""
  if isinstance(image, (bytes, np.bytes_)):
    image = image_codec.decode(bytes(image), scratch=True)
  return to_model_range(resize_bilinear(image, size))


def _maybe_flip(image: np.ndarray, rng: np.random.Generator, flip: bool) -> np.ndarray:
  return image_codec.mirror(image) if flip and rng.random() < 0.5 else image


def _scaled_window(image, window, size: int) -> np.ndarray:
  """The pixels of window (top, left, height, width) of an image given as pixels or
  bytes; a JPEG whose window holds 2x, 4x or 8x the pixels `size` needs decodes at that
  DCT scale, the window mapped onto it."""
  top, left, crop_h, crop_w = window
  if not isinstance(image, (bytes, np.bytes_)):
    return image[top:top + crop_h, left:left + crop_w]
  scale = image_codec.dct_scale((crop_h, crop_w), (size, size))
  pixels = image_codec.decode(bytes(image), scale, scratch=True)
  if scale == 1:
    return pixels[top:top + crop_h, left:left + crop_w]
  height, width = image_codec.jpeg_size(bytes(image))
  rows = np.rint(np.array([top, top + crop_h]) * pixels.shape[0] / height).astype(int)
  columns = np.rint(np.array([left, left + crop_w]) * pixels.shape[1] / width).astype(int)
  return pixels[rows[0]:rows[1], columns[0]:columns[1]]


def _image_size(image):
  """(height, width) of pixels or of encoded bytes (a JPEG's from its header; others
  decoded, then returned as pixels so that they decode once)."""
  if not isinstance(image, (bytes, np.bytes_)):
    return image, image.shape[:2]
  size = image_codec.jpeg_size(bytes(image)) if image_codec.is_jpeg(bytes(image)) else None
  if size is None:
    image = decode_image(image)
    return image, image.shape[:2]
  return image, size


def finish_train(resized: np.ndarray, rng: np.random.Generator, flip: bool,
                 randaug: Optional[Tuple[int, int]]) -> np.ndarray:
  """Flip and, with randaug = (N, M), RandAugment seeded from the example's generator
  (the tf.data path's order: tf_preprocess.finish_train, big_vision's): uint8 pixels. The
  resized crop is uint8 throughout, rounded, where tf.data resizes to floats and, for
  RandAugment only, truncates them (its crops are then half a level darker on average)."""
  pixels = _maybe_flip(np.asarray(resized, np.uint8), rng, flip)
  if randaug:
    seed = rng.integers(0, 2**32, size=2, dtype=np.uint32)
    pixels = randaugment.randaugment(pixels, *randaug, seed)
  return pixels


def inception_pixels(image, size: int, rng: np.random.Generator, *, flip: bool = True,
                     randaug: Optional[Tuple[int, int]] = None) -> np.ndarray:
  """Reference fine-tuning train crop as uint8 pixels: random window, bilinear resize,
  random flip (then RandAugment with randaug = (N, M))."""
  image, (height, width) = _image_size(image)
  window = crop_window.inception_window(height, width, rng)
  crop = image_codec.resize(_scaled_window(image, window, size), (size, size))
  return finish_train(crop, rng, flip, randaug)


def bit_pixels(image, crop: int, rng: np.random.Generator, *, resize: int = None,
               flip: bool = True, randaug: Optional[Tuple[int, int]] = None) -> np.ndarray:
  """BiT train preprocessing as uint8 pixels: resize to `resize` (HyperRule default),
  random crop, flip (then RandAugment with randaug = (N, M))."""
  resize = bit_resize(crop, resize)
  image, (height, width) = _image_size(image)
  resized = image_codec.resize(_scaled_window(image, (0, 0, height, width), resize),
                               (resize, resize))
  top, left = rng.integers(0, resize - crop + 1, size=2)
  window = resized[top:top + crop, left:left + crop]
  return finish_train(window, rng, flip, randaug)


def inception_crop(image, size: int, rng: np.random.Generator, **options) -> np.ndarray:
  """inception_pixels in [-1, 1] (a loader scales whole batches instead)."""
  return to_model_range(inception_pixels(image, size, rng, **options))


def bit_crop(image, crop: int, rng: np.random.Generator, **options) -> np.ndarray:
  """bit_pixels in [-1, 1]."""
  return to_model_range(bit_pixels(image, crop, rng, **options))


def swap_pairs(x: np.ndarray) -> np.ndarray:
  """Rows (0, 1), (2, 3), ... exchanged: the batch reversed within pairs."""
  return x.reshape(-1, 2, *x.shape[1:])[:, ::-1].reshape(x.shape)


def mixup(images: np.ndarray, labels: np.ndarray, alpha: float, rng: np.random.Generator):
  """BiT MixUp as preprocess.mixup: one lambda ~ Beta(alpha, alpha) per global batch, rows
  2i and 2i+1 partners. `labels` one-hot float [B, K]; B even."""
  lam = np.float32(rng.beta(alpha, alpha))
  mixed_images = lam * images + (1 - lam) * swap_pairs(images)
  mixed_labels = lam * labels + (1 - lam) * swap_pairs(labels)
  return mixed_images.astype(np.float32), mixed_labels.astype(np.float32)
