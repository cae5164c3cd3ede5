"""Preprocessing: shapes and ranges of the presets, statelessness, the JPEG fast path."""

import io

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from vit_jax import preprocess


def encode(pixels: np.ndarray, fmt: str, **options) -> tf.Tensor:
  """Image bytes written by PIL, as a scalar tf.string."""
  buffer = io.BytesIO()
  Image.fromarray(pixels).save(buffer, fmt, **options)
  return tf.constant(buffer.getvalue())


@pytest.fixture(name="pixels")
def fixture_pixels() -> np.ndarray:
  return np.random.default_rng(0).integers(0, 256, (45, 70, 3), dtype=np.uint8)


def seed(*values) -> tf.Tensor:
  return tf.constant(values, tf.int64)


def assert_model_image(image: tf.Tensor, size: int) -> None:
  assert image.shape == (size, size, 3)
  assert image.dtype == tf.float32
  assert -1.0 <= float(tf.reduce_min(image)) and float(tf.reduce_max(image)) <= 1.0


@pytest.mark.parametrize("fmt", [None, "JPEG", "PNG"])
def test_inception_crop_shape_and_range(pixels, fmt):
  image = tf.constant(pixels) if fmt is None else encode(pixels, fmt)
  assert_model_image(preprocess.inception_crop(image, 24, seed(0, 1)), 24)


@pytest.mark.parametrize("resize", [None, 40])
def test_bit_crop_shape_and_range(pixels, resize):
  assert_model_image(preprocess.bit_crop(encode(pixels, "PNG"), 32, seed(0, 1), resize=resize),
                     32)


def test_bit_resize_follows_the_hyperrule():
  assert (preprocess.bit_resize(128), preprocess.bit_resize(384)) == (160, 448)
  assert preprocess.bit_resize(16, 18) == 18
  with pytest.raises(ValueError, match="resize=12 is smaller than crop=16"):
    preprocess.bit_resize(16, 12)


def test_eval_resize_is_exact_and_scales_to_unit_range():
  white = np.full((30, 50, 3), 255, np.uint8)
  image = preprocess.eval_resize(tf.constant(white), 20)
  assert image.shape == (20, 20, 3)
  np.testing.assert_allclose(image, 1.0)
  np.testing.assert_allclose(preprocess.eval_resize(encode(0 * white, "PNG"), 7), -1.0)


@pytest.mark.parametrize("augment", [
    lambda image, s: preprocess.inception_crop(image, 16, s),
    lambda image, s: preprocess.bit_crop(image, 16, s, resize=30),
], ids=["inception", "bit"])
def test_augmentation_depends_only_on_the_seed(pixels, augment):
  image = tf.constant(pixels)
  np.testing.assert_array_equal(augment(image, seed(3, 7)), augment(image, seed(3, 7)))
  assert not np.array_equal(augment(image, seed(3, 7)), augment(image, seed(3, 8)))


def test_jpeg_fast_path_equals_decode_then_crop(pixels):
  # 4:4:4 chroma makes a window decode bit-exact (with 4:2:0 edges may differ slightly).
  encoded = encode(pixels, "JPEG", quality=95, subsampling=0)
  decoded = preprocess.decode_image(encoded)
  for s in range(6):
    jpeg_window = preprocess.inception_window(tf.image.extract_jpeg_shape(encoded), seed(s, 0))
    pixel_window = preprocess.inception_window(tf.shape(decoded), seed(s, 0))
    np.testing.assert_array_equal(jpeg_window, pixel_window)
    np.testing.assert_array_equal(preprocess.inception_crop(encoded, 20, seed(s, 1)),
                                  preprocess.inception_crop(decoded, 20, seed(s, 1)))


def test_decode_grayscale_and_rgba_to_rgb(pixels):
  gray = preprocess.decode_image(encode(pixels[..., 0], "PNG")).numpy()
  assert gray.shape == (45, 70, 3)
  assert all(np.array_equal(gray[..., c], pixels[..., 0]) for c in range(3))
  rgba = np.concatenate([pixels, np.full((45, 70, 1), 9, np.uint8)], axis=-1)
  np.testing.assert_array_equal(preprocess.decode_image(encode(rgba, "PNG")), pixels)


def test_mixup_mixes_neighbours_with_one_lambda():
  images = tf.reshape(tf.range(4, dtype=tf.float32), [4, 1, 1, 1]) * tf.ones([4, 2, 2, 3])
  labels = tf.one_hot([0, 1, 2, 3], 4)
  mixed_images, mixed_labels = preprocess.mixup(images, labels, 0.1, seed(0, 5))
  lam = float(mixed_labels[0, 0])
  partner = [1, 0, 3, 2]
  expected = lam * np.arange(4) + (1 - lam) * np.array(partner, np.float32)
  np.testing.assert_allclose(mixed_images[:, 0, 0, 0], expected, rtol=1e-6)
  np.testing.assert_allclose(np.diag(mixed_labels), lam, rtol=1e-6)
  np.testing.assert_allclose(mixed_labels.numpy()[range(4), partner], 1 - lam, rtol=1e-5)
  again, _ = preprocess.mixup(images, labels, 0.1, seed(0, 5))
  np.testing.assert_array_equal(again, mixed_images)
