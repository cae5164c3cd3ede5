"""Preprocessing: shapes and ranges of the presets, statelessness, the JPEG fast path."""

import io

import numpy as np
import pytest
import scipy.stats
import tensorflow as tf
from PIL import Image

from vit_jax.data.tf_stack import tf_preprocess


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
  assert_model_image(tf_preprocess.inception_crop(image, 24, seed(0, 1)), 24)


def test_randaug_runs_on_the_uint8_crop(pixels):
  image = encode(pixels, "JPEG")
  crop = tf.function(lambda x: tf_preprocess.inception_crop(x, 24, seed(0, 1), randaug=(2, 15)))
  out = crop(image)
  assert_model_image(out, 24)
  levels = out.numpy() * 127.5 + 127.5
  np.testing.assert_allclose(levels, np.rint(levels), atol=1e-3)  # whole uint8 levels
  np.testing.assert_array_equal(crop(image), out)
  bit = tf_preprocess.bit_crop(image, 16, seed(0, 1), resize=20, randaug=(1, 10))
  assert_model_image(bit, 16)


@pytest.mark.parametrize("resize", [None, 40])
def test_bit_crop_shape_and_range(pixels, resize):
  assert_model_image(tf_preprocess.bit_crop(encode(pixels, "PNG"), 32, seed(0, 1), resize=resize),
                     32)


def test_eval_resize_is_exact_and_scales_to_unit_range():
  white = np.full((30, 50, 3), 255, np.uint8)
  image = tf_preprocess.eval_resize(tf.constant(white), 20)
  assert image.shape == (20, 20, 3)
  np.testing.assert_allclose(image, 1.0)
  np.testing.assert_allclose(tf_preprocess.eval_resize(encode(0 * white, "PNG"), 7), -1.0)


@pytest.mark.parametrize("augment", [
    lambda image, s: tf_preprocess.inception_crop(image, 16, s),
    lambda image, s: tf_preprocess.bit_crop(image, 16, s, resize=30),
], ids=["inception", "bit"])
def test_augmentation_depends_only_on_the_seed(pixels, augment):
  image = tf.constant(pixels)
  np.testing.assert_array_equal(augment(image, seed(3, 7)), augment(image, seed(3, 7)))
  assert not np.array_equal(augment(image, seed(3, 7)), augment(image, seed(3, 8)))


def test_jpeg_fast_path_equals_decode_then_crop(pixels):
  # 4:4:4 chroma makes a window decode bit-exact (with 4:2:0 edges may differ slightly).
  encoded = encode(pixels, "JPEG", quality=95, subsampling=0)
  decoded = tf_preprocess.decode_image(encoded)
  for s in range(6):
    jpeg_window = tf_preprocess.inception_window(tf.image.extract_jpeg_shape(encoded), seed(s, 0))
    pixel_window = tf_preprocess.inception_window(tf.shape(decoded), seed(s, 0))
    np.testing.assert_array_equal(jpeg_window, pixel_window)
    np.testing.assert_array_equal(tf_preprocess.inception_crop(encoded, 20, seed(s, 1)),
                                  tf_preprocess.inception_crop(decoded, 20, seed(s, 1)))


def test_decode_grayscale_and_rgba_to_rgb(pixels):
  gray = tf_preprocess.decode_image(encode(pixels[..., 0], "PNG")).numpy()
  assert gray.shape == (45, 70, 3)
  assert all(np.array_equal(gray[..., c], pixels[..., 0]) for c in range(3))
  rgba = np.concatenate([pixels, np.full((45, 70, 1), 9, np.uint8)], axis=-1)
  np.testing.assert_array_equal(tf_preprocess.decode_image(encode(rgba, "PNG")), pixels)


def test_mixup_mixes_neighbours_with_one_lambda():
  images = tf.reshape(tf.range(4, dtype=tf.float32), [4, 1, 1, 1]) * tf.ones([4, 2, 2, 3])
  labels = tf.one_hot([0, 1, 2, 3], 4)
  mixed_images, mixed_labels = tf_preprocess.mixup(images, labels, 0.1, seed(0, 5))
  lam = float(mixed_labels[0, 0])
  partner = [1, 0, 3, 2]
  expected = lam * np.arange(4) + (1 - lam) * np.array(partner, np.float32)
  np.testing.assert_allclose(mixed_images[:, 0, 0, 0], expected, rtol=1e-6)
  np.testing.assert_allclose(np.diag(mixed_labels), lam, rtol=1e-6)
  np.testing.assert_allclose(mixed_labels.numpy()[range(4), partner], 1 - lam, rtol=1e-5)
  again, _ = tf_preprocess.mixup(images, labels, 0.1, seed(0, 5))
  np.testing.assert_array_equal(again, mixed_images)


def draw(fn, num_seeds: int) -> np.ndarray:
  """fn(seed) for seeds (0, 7) .. (num_seeds - 1, 7), in one traced map (fast)."""
  seeds = tf.stack([tf.range(num_seeds, dtype=tf.int64),
                    tf.fill([num_seeds], tf.constant(7, tf.int64))], axis=1)
  return tf.function(lambda s: tf.map_fn(fn, s, fn_output_signature=tf.float32))(seeds).numpy()


def test_inception_window_area_and_aspect_ranges():
  """The reference crop: 5%-100% of the area, aspect 3/4-4/3. TF's sampler draws an aspect
  ratio uniformly, then an integer height uniformly between the heights that give the
  area bounds, and rejects what misses the bounds after rounding: every area fraction lies
  within them, about 6.7% fall under 0.07 and 1.5% over 0.9 (2,000 draws on 200 x 200;
  the asserted shares are >= 4 standard deviations inside). torchvision's 0.08, or a 0.9
  maximum, leave none there. (Uniform heights make the mean area ~0.38, not the 0.525 of
  uniform areas.) Width is rounded, so aspects stray by <= 0.5 / height."""
  def window(seed):
    _, size = tf_preprocess.inception_window(tf.constant([200, 200, 3]), seed)
    return tf.cast(size[:2], tf.float32)
  height, width = draw(window, 2000).T
  area, aspect = height * width / 200**2, width / height
  assert area.min() >= 0.05 and area.max() <= 1.0
  assert np.mean(area < 0.07) > 0.03 and np.mean(area > 0.9) > 0.004
  assert aspect.min() >= 3 / 4 - 0.5 / 38 and aspect.max() <= 4 / 3 + 0.5 / 38
  assert np.mean(aspect < 0.77) > 0.01 and np.mean(aspect > 1.3) > 0.03


def test_mixup_lambda_is_symmetric_beta():
  """lambda ~ Beta(alpha, alpha): BiT's MixUp, U-shaped at its alpha = 0.1. The empirical
  CDF of 2,000 draws stays within 0.05 of Beta's (DKW: fails by chance with probability
  < 2 exp(-2 * 2000 * 0.05^2) = 1e-4); a uniform or asymmetric lambda strays >= 0.09.
  Compared inside (0.001, 0.999): float32 rounds ~10% of the draws to exactly 0 or 1."""
  points = np.linspace(0.001, 0.999, 999)
  for alpha in (0.1, 2.0):
    def lam(seed, alpha=alpha):
      _, labels = tf_preprocess.mixup(tf.zeros([2, 1, 1, 1]), tf.eye(2), alpha, seed)
      return labels[0, 0]
    draws = np.sort(draw(lam, 2000))
    empirical = np.searchsorted(draws, points, side="right") / len(draws)
    distance = np.abs(empirical - scipy.stats.beta(alpha, alpha).cdf(points)).max()
    assert distance < 0.05, (alpha, distance)


def bilinear(pixels: np.ndarray, size: int) -> np.ndarray:
  """Reference bilinear resize to size x size: half-pixel centres, no antialiasing (each
  output pixel blends the 2 x 2 input pixels around its centre however much it shrinks),
  scaled to [-1, 1]."""
  def weights(in_size):
    centre = (np.arange(size) + 0.5) * in_size / size - 0.5
    low = np.floor(centre)
    matrix = np.zeros((size, in_size))
    for index, weight in ((low, 1 - (centre - low)), (low + 1, centre - low)):
      np.add.at(matrix, (np.arange(size), np.clip(index, 0, in_size - 1).astype(int)), weight)
    return matrix
  resized = np.einsum("hy,yxc,wx->hwc", weights(pixels.shape[0]), pixels.astype(np.float64),
                      weights(pixels.shape[1]))
  return (resized - 127.5) / 127.5


def whole_image_window(image_shape, seed):
  """An inception_window that always picks the whole image (begin, size)."""
  del seed
  return tf.zeros([3], tf.int32), tf.concat([tf.cast(image_shape[:2], tf.int32), [-1]], 0)


RESIZES = {  # name: (image, seed) -> the preset's 20 x 20 output
    "eval": lambda image, s: tf_preprocess.eval_resize(image, 20),
    "inception": lambda image, s: tf_preprocess.inception_crop(image, 20, s),
    "bit": lambda image, s: tf_preprocess.bit_crop(image, 20, s, resize=20),
}


@pytest.mark.parametrize("name", RESIZES)
def test_resizes_are_bilinear_without_antialias_and_train_flips_mirror(pixels, monkeypatch,
                                                                       name):
  """Shrinking 45 x 70 to 20 x 20 tells bilinear from antialiased, bicubic or nearest.
  With the crop window the whole image (inception) or resize == crop (bit), the train
  presets are that resize, mirrored left-right for about half of the seeds."""
  monkeypatch.setattr(tf_preprocess, "inception_window", whole_image_window)
  expected = bilinear(pixels, 20)
  outputs = [RESIZES[name](tf.constant(pixels), seed(s, 0)).numpy() for s in range(12)]
  mirrored = []
  for output in outputs:
    mirrored.append(not np.allclose(output, expected, atol=1e-5))
    np.testing.assert_allclose(output, expected[:, ::-1] if mirrored[-1] else expected,
                               atol=1e-5)
  assert not any(mirrored) if name == "eval" else 0 < sum(mirrored) < 12


def test_bit_crop_batch_is_each_rows_resized_window():
  """The batched BiT crop (same-sized pixel images): row b is the window of the resized
  image at floor(u * (resize - crop + 1)), mirrored when u_flip < 0.5."""
  images = np.random.default_rng(0).integers(0, 256, (4, 8, 8, 3), dtype=np.uint8)
  uniforms = np.array([[0.0, 0.0, 0.9], [0.999, 0.999, 0.1], [0.5, 0.2, 0.49],
                       [0.3, 0.8, 0.5]], np.float32)
  out = tf_preprocess.bit_crop_batch(tf.constant(images), 16, tf.constant(uniforms), resize=18)
  resized = tf.image.resize(images, [18, 18], method="bilinear", antialias=False).numpy()
  for b, (u_row, u_col, u_flip) in enumerate(uniforms):
    row, col = int(u_row * 3), int(u_col * 3)  # resize - crop + 1 = 3 offsets
    window = resized[b, row:row + 16, col:col + 16]
    if u_flip < 0.5:
      window = window[:, ::-1]
    np.testing.assert_allclose(out[b].numpy(), (window - 127.5) / 127.5, atol=1e-6)
  unflipped = tf_preprocess.bit_crop_batch(tf.constant(images), 16, tf.constant(uniforms),
                                        resize=18, flip=False)
  np.testing.assert_allclose(unflipped[1].numpy(), (resized[1, 2:, 2:] - 127.5) / 127.5,
                             atol=1e-6)
