"""NaFlex for the Grain loader (grain_naflex): eval patches are transformers' reading
(naflex_patches), train patches the preset's window at its own size, flipped by the
example's generator, scaled to [-1, 1] a batch at a time with zero padding."""

import io

import numpy as np
from PIL import Image

from vit_jax.data import naflex_patches
from vit_jax.data.grain_stack import crop_window, grain_naflex


class Config(dict):
  """The pp keys a NaFlex train crop reads (a ConfigDict's get and attributes)."""
  __getattr__ = dict.__getitem__


def image(height, width):
  return np.random.default_rng(height + width).integers(0, 256, (height, width, 3), np.uint8)


def as_float(patches):
  """One example's uint8 train patches as the loader scales them."""
  return grain_naflex.scaled({k: v[None] for k, v in patches.items()})["patches"][0]


def test_eval_patches_of_bytes_are_naflex_patches_of_the_pixels():
  pixels = image(33, 70)
  buffer = io.BytesIO()
  Image.fromarray(pixels).save(buffer, "PNG")
  got = grain_naflex.eval_patches(buffer.getvalue(), 8, 20)
  for ours, theirs in zip((got["patches"], got["mask"], got["grid"]),
                          naflex_patches.patchify(pixels, 8, 20)):
    np.testing.assert_array_equal(ours, theirs)


def test_train_patches_cut_the_inception_window_at_its_own_size():
  pixels = image(60, 150)
  pp = Config(preset="inception", crop=32, resize=None, flip=False, max_patches=40)
  top, left, height, width = crop_window.inception_window(60, 150, np.random.default_rng(7))
  expected = naflex_patches.patchify(pixels[top:top + height, left:left + width], 8, 40)
  got = grain_naflex.train_patches(pixels, np.random.default_rng(7), pp, 8)
  assert got["patches"].dtype == np.uint8
  np.testing.assert_allclose(as_float(got), expected[0], atol=1e-6)
  np.testing.assert_array_equal(got["grid"], expected[2])


def test_a_whole_bit_window_is_the_eval_reading_flipped_by_the_generator():
  pixels = image(40, 20)
  pp = Config(preset="bit", crop=16, resize=16, flip=True, max_patches=12)
  plain = naflex_patches.patchify(pixels, 4, 12)[0]
  flipped = naflex_patches.patchify(np.ascontiguousarray(pixels[:, ::-1]), 4, 12)[0]
  seen = set()
  for seed in range(8):
    got = as_float(grain_naflex.train_patches(pixels, np.random.default_rng(seed), pp, 4))
    same = np.allclose(got, plain, atol=1e-6)
    assert same or np.allclose(got, flipped, atol=1e-6)
    seen.add(same)
  assert seen == {True, False}


def test_a_bit_window_keeps_its_share_of_each_side():
  pp = Config(preset="bit", crop=16, resize=20, flip=False, max_patches=64)
  pixels = image(100, 30)
  got = grain_naflex.train_patches(pixels, np.random.default_rng(0), pp, 4)
  window = naflex_patches.target_size(80, 24, 4, 64)  # 16/20 of each side
  assert tuple(got["grid"] * 4) == window
