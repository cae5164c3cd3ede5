"""Image preprocessing in numpy and PIL, without TensorFlow: the Grain loader's (and
`predict`'s) decoding, the train/eval presets and MixUp, and the settings both loaders
share (presets, the BiT HyperRule).

The operations are those of preprocess.py (tf.data): bilinear resizes use TensorFlow's
half-pixel-centre sampling without antialiasing, so evaluation pixels agree with the
tf.data path's within a level. Random choices come from a numpy Generator the caller
seeds per example (order.example_rng), so an example's augmentation depends on the seed
and its stream position alone. Outputs are float32 in [-1, 1].
"""

import functools
import io
from typing import Optional, Tuple

import numpy as np
from PIL import Image

from vit_jax import errors
from vit_jax.data import pil_pixels, randaugment

PRESETS = ("inception", "bit")
INCEPTION_AREA = (0.05, 1.0)
INCEPTION_ASPECT = (3 / 4, 4 / 3)
INCEPTION_ATTEMPTS = 100
# BiT HyperRule (resize, crop): images under 96x96 px -> (160, 128), others -> (448, 384).
# The crop (model resolution) is the config's choice; bit_resize maps it to the resize.
HYPERRULE_SMALL = (160, 128)
HYPERRULE_LARGE = (448, 384)


def side_pair(size) -> list:
  """[height, width] of a side or of a (height, width) pair."""
  return [size, size] if isinstance(size, int) else list(size)


def bit_resize(crop: int, resize: int = None) -> int:
  """`resize`, or by default the HyperRule's resize for `crop`, keeping the rule's ratio
  (160/128 for crops up to 128 px, 448/384 above) for crops it does not list."""
  if resize is None:
    rule_resize, rule_crop = HYPERRULE_SMALL if crop <= HYPERRULE_SMALL[1] else HYPERRULE_LARGE
    resize = round(crop * rule_resize / rule_crop)
  if resize < crop:
    raise errors.InvalidInput(
        f"bit preprocessing: resize={resize} is smaller than crop={crop}; "
        "set pp.resize >= pp.crop")
  return resize


def decode_image(encoded: bytes) -> np.ndarray:
  """Encoded bytes (JPEG, PNG, GIF, BMP) -> uint8 [H, W, 3], the pixels of
  tf.io.decode_image(channels=3) in every mode (pil_pixels)."""
  with Image.open(io.BytesIO(encoded)) as image:
    image.load()  # a truncated file raises here (OSError), not later
    return pil_pixels.rgb_pixels(image)


def pixels_of(image) -> np.ndarray:
  """uint8 RGB pixels of an image given as pixels or as encoded bytes."""
  return decode_image(bytes(image)) if isinstance(image, (bytes, np.bytes_)) else image


def to_model_range(image: np.ndarray) -> np.ndarray:
  """[0, 255] -> [-1, 1], the input range of every released model."""
  return (np.asarray(image, np.float32) - 127.5) / 127.5


@functools.lru_cache(maxsize=64)
def _axis_weights(in_size: int, out_size: int):
  """(lower, upper, fraction) of each output row/column: TensorFlow's half-pixel-centre
  bilinear sampling (tf.image.resize, antialias=False)."""
  scale = np.float32(in_size / out_size)
  source = (np.arange(out_size, dtype=np.float32) + np.float32(0.5)) * scale - np.float32(0.5)
  floor = np.floor(source)
  lower = np.clip(floor, 0, in_size - 1).astype(np.int64)
  upper = np.minimum(np.ceil(source), in_size - 1).astype(np.int64)
  upper = np.maximum(upper, 0)
  fraction = (source - floor).astype(np.float32)
  for array in (lower, upper, fraction):
    array.flags.writeable = False  # cached and shared
  return lower, upper, fraction


def resize_bilinear(image: np.ndarray, size) -> np.ndarray:
  """float32 [h, w, C] bilinear resize of [H, W, C], TensorFlow's arithmetic step for
  step (the four neighbours gathered as uint8, columns blended, then rows): the same
  floats as tf.image.resize, and the float work is done at the output's size."""
  height, width = side_pair(size)
  image = np.asarray(image)
  top_row, bottom_row, row_fraction = _axis_weights(image.shape[0], height)
  left, right, column_fraction = _axis_weights(image.shape[1], width)
  upper, lower = np.take(image, top_row, axis=0), np.take(image, bottom_row, axis=0)

  def corner(rows, columns):
    return np.take(rows, columns, axis=1).astype(np.float32)

  column_fraction = column_fraction[None, :, None]
  top_left, top_right = corner(upper, left), corner(upper, right)
  bottom_left, bottom_right = corner(lower, left), corner(lower, right)
  top = top_left + (top_right - top_left) * column_fraction
  bottom = bottom_left + (bottom_right - bottom_left) * column_fraction
  return top + (bottom - top) * row_fraction[:, None, None]


def eval_resize(image, size) -> np.ndarray:
  """Evaluation and prediction: plain bilinear resize to size x size (or to size =
  (height, width)), no crop."""
  return to_model_range(resize_bilinear(pixels_of(image), size))


def _maybe_flip(image: np.ndarray, rng: np.random.Generator, flip: bool) -> np.ndarray:
  return image[:, ::-1] if flip and rng.random() < 0.5 else image


def inception_window(height: int, width: int, rng: np.random.Generator):
  """(top, left, crop height, crop width): 5-100% of the area, aspect 3/4-4/3, up to
  INCEPTION_ATTEMPTS draws, else the whole image."""
  area = height * width
  for _ in range(INCEPTION_ATTEMPTS):
    target = area * rng.uniform(*INCEPTION_AREA)
    aspect = rng.uniform(*INCEPTION_ASPECT)
    crop_w = int(round(np.sqrt(target * aspect)))
    crop_h = int(round(np.sqrt(target / aspect)))
    if 0 < crop_h <= height and 0 < crop_w <= width:
      top = int(rng.integers(0, height - crop_h + 1))
      left = int(rng.integers(0, width - crop_w + 1))
      return top, left, crop_h, crop_w
  return 0, 0, height, width


def _finish_train(resized: np.ndarray, rng: np.random.Generator, flip: bool,
                  randaug: Optional[Tuple[int, int]]) -> np.ndarray:
  """Flip and, with randaug = (N, M), the tf.data path's order (preprocess._finish_train,
  big_vision's): the resized crop back to uint8 (clipped, truncated), flip, RandAugment
  seeded from the example's generator, [-1, 1]."""
  if not randaug:
    return to_model_range(_maybe_flip(resized, rng, flip))
  pixels = _maybe_flip(np.clip(resized, 0, 255).astype(np.uint8), rng, flip)
  seed = rng.integers(0, 2**32, size=2, dtype=np.uint32)
  return to_model_range(randaugment.randaugment(pixels, *randaug, seed))


def inception_crop(image, size: int, rng: np.random.Generator, *, flip: bool = True,
                   randaug: Optional[Tuple[int, int]] = None) -> np.ndarray:
  """Reference fine-tuning train crop: random window, bilinear resize, random flip (then
  RandAugment with randaug = (N, M))."""
  pixels = pixels_of(image)
  top, left, crop_h, crop_w = inception_window(*pixels.shape[:2], rng)
  crop = resize_bilinear(pixels[top:top + crop_h, left:left + crop_w], size)
  return _finish_train(crop, rng, flip, randaug)


def bit_crop(image, crop: int, rng: np.random.Generator, *, resize: int = None,
             flip: bool = True, randaug: Optional[Tuple[int, int]] = None) -> np.ndarray:
  """BiT train preprocessing: resize to `resize` (HyperRule default), random crop, flip
  (then RandAugment with randaug = (N, M))."""
  resize = bit_resize(crop, resize)
  resized = resize_bilinear(pixels_of(image), resize)
  top, left = rng.integers(0, resize - crop + 1, size=2)
  window = resized[top:top + crop, left:left + crop]
  return _finish_train(window, rng, flip, randaug)


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
