"""The Grain path's C decoding and resizing: PIL's pixels, TensorFlow's bilinear sampling,
DCT-scaled JPEG decodes that only shrink what the output does not need."""

import io
import os

import cv2
import numpy as np
import pytest
import sklearn
import tensorflow as tf
from PIL import Image

from vit_jax.data.grain_stack import crop_window, image_codec, np_preprocess

PHOTO = os.path.join(os.path.dirname(sklearn.__file__), "datasets", "images", "china.jpg")


@pytest.fixture(name="photo", scope="module")
def fixture_photo() -> np.ndarray:
  return np.asarray(Image.open(PHOTO).convert("RGB"))


def encode(pixels: np.ndarray, fmt: str = "JPEG", **options) -> bytes:
  buffer = io.BytesIO()
  Image.fromarray(pixels).save(buffer, fmt, **options)
  return buffer.getvalue()


@pytest.mark.parametrize("options", [{}, {"progressive": True}, {"subsampling": 0},
                                     {"grey": True}, {"fmt": "PNG"}])
def test_decode_gives_pils_pixels(photo, options):
  options = dict(options)
  pixels = photo[:, :, 0] if options.pop("grey", False) else photo
  encoded = encode(pixels, **options)
  with Image.open(io.BytesIO(encoded)) as image:
    expected = np.asarray(image.convert("RGB"))
  got = image_codec.decode(encoded)
  assert got.dtype == np.uint8 and got.shape == photo.shape
  np.testing.assert_array_equal(got, expected)


def test_dct_scaled_decode_and_its_choice(photo):
  encoded = encode(photo)  # 427 x 640
  assert image_codec.jpeg_size(encoded) == (427, 640)
  assert image_codec.decode(encoded, 2).shape == (214, 320, 3)
  assert image_codec.decode(encoded, 8).shape == (54, 80, 3)
  assert image_codec.dct_scale((427, 640), (224, 224)) == 1
  assert image_codec.dct_scale((448, 900), (224, 224)) == 2
  assert image_codec.dct_scale((427, 640), (32, 32)) == 8
  assert image_codec.jpeg_size(b"\xff\xd8 not a jpeg") is None


@pytest.mark.parametrize("size", [(224, 224), (32, 32), (900, 500), (100, 300)])
def test_resize_is_tf_image_resize_bilinear(photo, size):
  """float32 pixels: tf.image.resize's values to float rounding; uint8 pixels: those
  values rounded by OpenCV's fixed point, within 0.8 of a level."""
  expected = tf.image.resize(photo, size, method="bilinear", antialias=False).numpy()
  got = image_codec.resize(photo.astype(np.float32), size)
  assert got.dtype == np.float32 and got.shape == (*size, 3)
  assert np.abs(got - expected).max() < 0.02
  rounded = image_codec.resize(photo, size)
  assert rounded.dtype == np.uint8 and rounded.shape == (*size, 3)
  assert np.abs(rounded - expected).max() <= 0.8
  assert np.abs(rounded - expected).mean() < 0.3


def test_mirror_and_model_range_are_the_numpy_ones(photo):
  np.testing.assert_array_equal(image_codec.mirror(photo[:50, :70]), photo[:50, 69::-1])
  for pixels in (photo, np.stack([photo, photo[::-1]])):  # an image, a batch
    np.testing.assert_array_equal(image_codec.model_range(pixels),
                                  (pixels.astype(np.float32) - 127.5) / 127.5)


def test_a_large_jpeg_crop_decodes_scaled_and_antialiased(photo):
  """A 1280 x 854 JPEG cropped to 32 px: the window decodes at a DCT scale (1/8 to 1/2),
  which averages like an area resize of the full window, where the full decode's bilinear
  resize (tf.data's) aliases: closer to the area resize and the same picture."""
  big = np.asarray(Image.fromarray(photo).resize((1280, 854), Image.BICUBIC))
  encoded = encode(big, quality=95)
  decoded = image_codec.decode(encoded)
  for seed in range(4):
    top, left, height, width = crop_window.inception_window(854, 1280,
                                                            np.random.default_rng(seed))
    window = decoded[top:top + height, left:left + width].astype(np.float32)
    area = np_preprocess.to_model_range(cv2.resize(window, (32, 32),
                                                   interpolation=cv2.INTER_AREA))
    scaled = np_preprocess.inception_crop(encoded, 32, np.random.default_rng(seed), flip=False)
    full = np_preprocess.inception_crop(decoded, 32, np.random.default_rng(seed), flip=False)
    assert scaled.shape == full.shape == (32, 32, 3)
    assert np.abs(scaled - area).mean() < np.abs(full - area).mean()
    assert np.abs(scaled - area).mean() * 127.5 < 8


def test_scratch_decodes_are_reused_but_crops_are_not(photo):
  """decode(scratch=True) reuses this thread's buffer; the crops made from it are new
  arrays that a later decode leaves alone."""
  first, second = encode(photo), encode(photo[::-1].copy())
  np.testing.assert_array_equal(image_codec.decode(first, scratch=True), photo_pixels(first))
  crop = np_preprocess.inception_pixels(first, 48, np.random.default_rng(0))
  kept = crop.copy()
  np_preprocess.inception_pixels(second, 48, np.random.default_rng(0))
  np.testing.assert_array_equal(crop, kept)
  assert not np.shares_memory(image_codec.decode(first, scratch=True),
                              image_codec.decode(first))


def photo_pixels(encoded: bytes) -> np.ndarray:
  with Image.open(io.BytesIO(encoded)) as image:
    return np.asarray(image.convert("RGB"))
