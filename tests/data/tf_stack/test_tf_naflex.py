"""NaFlex in TensorFlow (tf_naflex) against big_vision's ops_naflex, transcribed below in
TF ops from google-research/big_vision at 0127fb6: big_vision/pp/proj/image_text/
ops_naflex.py (_get_image_size_for_seq, resize_to_sequence, patchify), with
pp/ops_general.py's value_range(-1, 1) and pad_to_shape as its SigLIP 2 demo chains
them (configs/proj/image_text/SigLIP2_demo.ipynb); and how far it is from transformers'
reading (naflex_patches, the Grain loader's)."""

import io
import itertools

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from vit_jax.data import naflex_patches
from vit_jax.data.tf_stack import tf_naflex, tf_preprocess

ODD_SIZES = [(1, 1), (3, 500), (500, 3), (17, 29), (224, 224), (1000, 10), (37, 101),
             (9, 81), (250, 333)]
BUDGETS = [(16, 256), (14, 23), (8, 64)]  # (patch, max_patches)
# PIL rounds to uint8 (half a level) after a fixed-point filter; measured up to 1.005 levels
# of 255 (one level is 1 / 127.5 in [-1, 1]) on these images.
TOLERANCE = 1.02 / 127.5


def big_vision_size(image_hw, patch_size, max_sequence_len, eps=1e-5):
  """ops_naflex._get_image_size_for_seq (divisible_by_patch=True): its target_hw."""
  def prepare_target_hw(ratio):
    target_hw = tf.cast(image_hw, tf.float32) * ratio
    target_hw = patch_size * tf.math.ceil(target_hw / patch_size)
    return tf.cast(tf.maximum(target_hw, patch_size), tf.int32)

  def is_feasible(ratio):
    return tf.math.reduce_prod(prepare_target_hw(ratio) / patch_size) <= max_sequence_len

  def search(lb, rb):
    mid = (lb + rb) / 2
    return tf.cond(is_feasible(mid), lambda: (mid, rb), lambda: (lb, mid))

  ratio, _ = tf.while_loop(lambda lb, rb: (rb - lb) >= eps, search,
                           (tf.constant(eps / 10.), tf.constant(100.0)), parallel_iterations=1)
  return prepare_target_hw(ratio)


def big_vision_naflex(pixels, patch_size, n_patches):
  """value_range(-1, 1) | resize_to_sequence | patchify | pad_to_shape: (patches, type,
  yidx, xidx) as numpy."""
  image = tf.cast(pixels, tf.float32) / 255.0 * 2.0 - 1.0
  target_hw = big_vision_size(tf.shape(image)[:2], patch_size, n_patches)
  image = tf.image.resize(image, target_hw, preserve_aspect_ratio=False, antialias=True)
  patches = tf.image.extract_patches(image[None], sizes=[1, patch_size, patch_size, 1],
                                     strides=[1, patch_size, patch_size, 1], rates=[1, 1, 1, 1],
                                     padding="VALID")[0]
  nh, nw, d = tf.shape(patches)[0], tf.shape(patches)[1], tf.shape(patches)[2]
  gy, gx = tf.meshgrid(tf.range(nh), tf.range(nw), indexing="ij")
  count = nh * nw
  pad = lambda x, rest: tf.pad(x, [[0, n_patches - count]] + rest).numpy()
  return (pad(tf.reshape(patches, (count, d)), [[0, 0]]), pad(tf.fill([count], 1), []),
          pad(tf.reshape(gy, [count]), []), pad(tf.reshape(gx, [count]), []))


def odd_image(height, width):
  return np.random.default_rng(height * 1000 + width).integers(0, 256, (height, width, 3),
                                                               dtype=np.uint8)


@pytest.mark.parametrize("patch,budget", BUDGETS)
def test_eval_patches_equal_big_vision_on_odd_sizes(patch, budget):
  for height, width in ODD_SIZES:
    image = odd_image(height, width)
    patches, types, yidx, xidx = big_vision_naflex(image, patch, budget)
    ours = {k: v.numpy() for k, v in tf_naflex.eval_patches(tf.constant(image), patch,
                                                            budget).items()}
    count = int(types.sum())
    assert tuple(ours["grid"]) == (yidx[count - 1] + 1, xidx[count - 1] + 1), (height, width)
    np.testing.assert_array_equal(ours["mask"], types)
    np.testing.assert_allclose(ours["patches"], patches, atol=1e-5, err_msg=str((height, width)))


@pytest.mark.parametrize("size,patch,budget,expected", [  # ops_naflex_test.py's table
    ((48, 48), 3, 121, (33, 33)), ((112, 109), 7, 225, (105, 105)),
    ((176, 176), 11, 64, (88, 88)), ((256, 64), 16, 12, (96, 32)),
    ((256, 64), 8, 15, (56, 16)), ((63, 241), 16, 16, (32, 128)),
    ((16, 512), 16, 16, (16, 256))])
def test_target_size_as_big_vision_tests_it(size, patch, budget, expected):
  assert tuple(tf_naflex.target_size(tf.constant(size), patch, budget).numpy()) == expected


@pytest.mark.parametrize("patch,budget", BUDGETS)
def test_transformers_reading_is_within_a_level_on_the_same_grid(patch, budget):
  """The Grain loader's pixels (PIL on uint8) against these (float, no rounding); the
  grids agree but where big_vision's float32 bisection lets a boundary scale through."""
  for height, width in ODD_SIZES:
    if (height, width) == (9, 81) and (patch, budget) == (16, 256):
      continue  # the known grid difference: the next test
    image = odd_image(height, width)
    ours = tf_naflex.eval_patches(tf.constant(image), patch, budget)
    theirs = naflex_patches.patchify(image, patch, budget)
    np.testing.assert_array_equal(ours["grid"], theirs[2], err_msg=str((height, width)))
    np.testing.assert_array_equal(ours["mask"], theirs[1])
    assert np.abs(ours["patches"].numpy() - theirs[0]).max() <= TOLERANCE


def test_float32_bisection_lets_one_more_column_through_where_float64_does_not():
  """9 x 81 at 16 px, 256 patches: the exact scale 80/9 gives 5 rows x 45 columns; in
  float32, 9 * scale / 16 rounds down to 5 while 81 * scale / 16 passes 45: 5 x 46."""
  assert tuple(tf_naflex.target_size(tf.constant([9, 81]), 16, 256).numpy()) == (80, 736)
  assert naflex_patches.target_size(9, 81, 16, 256) == (80, 720)


# Sides up to 30000 px; (patch, budget) pairs covering patches 4-16 and the configs' budgets
# (naflex_demo's 16 and 64 at 4 px, the SigLIP 2 NaFlex configs' 256, 576 and 1024 at 16 px).
BIG_SIDES = [1, 9, 333, 4000, 6000, 12345, 30000]
BIG_BUDGETS = [(4, 16), (4, 64), (8, 256), (14, 576), (16, 256), (16, 1024)]


@pytest.mark.parametrize("patch,budget", BIG_BUDGETS)
def test_big_photos_get_the_grain_loaders_grid_within_a_patch(patch, budget):
  """Past H * W * 2500 / patch^2 = 2^31 an int32 patch count wraps (a 6000 x 4000 photo at
  4 px asked for a 556088 x 370728 image); both loaders' grids fit the budget and agree
  within one patch per side (float32's one more column, as above)."""
  sizes = np.array(list(itertools.product(BIG_SIDES, BIG_SIDES)), np.int32)
  ours = tf.function(lambda s: tf.map_fn(lambda hw: tf_naflex.target_size(hw, patch, budget),
                                         s))(tf.constant(sizes)).numpy()
  for (height, width), got in zip(sizes, ours):
    grain = np.array(naflex_patches.target_size(int(height), int(width), patch, budget))
    assert np.prod(got // patch) <= budget, (height, width, got)
    assert np.abs(got - grain).max() <= patch, (height, width, got, grain)


def test_a_flat_6000_by_4000_jpeg_is_cut_in_the_budget():
  """The sweep's photo, end to end: encoded bytes decoded, resized and cut."""
  encoded = io.BytesIO()
  Image.new("RGB", (6000, 4000), (200, 100, 50)).save(encoded, "JPEG")
  got = tf_naflex.eval_patches(tf.constant(encoded.getvalue()), 4, 64)
  assert tuple(got["grid"].numpy()) == (6, 9) == tuple(
      np.array(naflex_patches.target_size(4000, 6000, 4, 64)) // 4)
  assert got["mask"].numpy().sum() == 54 and got["patches"].shape == (64, 48)
  red = got["patches"].numpy()[:54, 0::3]
  assert np.abs(red - (200 / 127.5 - 1)).max() <= 3 / 127.5  # the flat colour, JPEG's levels


def test_train_patches_cut_the_inception_window_at_its_own_size():
  image, seed = odd_image(60, 150), tf.constant([4, 2], tf.int64)
  pp = dict(preset="inception", crop=32, resize=None, flip=False, max_patches=40)
  crop_seed, _ = tf.unstack(tf.random.experimental.stateless_split(seed, 2))
  begin, size = tf_preprocess.inception_window(tf.shape(image), crop_seed)
  window = tf.slice(tf.constant(image), begin, size)
  expected = tf_naflex.eval_patches(window, 8, 40)
  got = tf_naflex.train_patches(tf.constant(image), seed, Config(pp), 8)
  for key in ("patches", "mask", "grid"):
    np.testing.assert_allclose(got[key], expected[key], atol=1e-6)
  rows, cols = got["grid"].numpy()
  assert abs(cols / rows - size[1] / size[0]) < 0.5  # not squashed to a square


def test_train_patches_of_a_whole_bit_window_are_the_eval_patches_flipped_by_seed():
  image = tf.constant(odd_image(40, 20))
  pp = Config(dict(preset="bit", crop=16, resize=16, flip=True, max_patches=12))
  expected = tf_naflex.eval_patches(image, 4, 12)
  flipped = tf_naflex.eval_patches(tf.reverse(image, [1]), 4, 12)
  seen = set()
  for i in range(8):
    got = tf_naflex.train_patches(image, tf.constant([i, 0], tf.int64), pp, 4)
    same = np.allclose(got["patches"], expected["patches"], atol=1e-6)
    assert same or np.allclose(got["patches"], flipped["patches"], atol=1e-6)
    seen.add(same)
  assert seen == {True, False}


def test_randaugment_runs_on_the_window_before_it_is_cut():
  pp = Config(dict(preset="inception", crop=32, resize=None, flip=True, max_patches=30,
                   randaug=(2, 15)))
  got = tf_naflex.train_patches(tf.constant(odd_image(50, 90)), tf.constant([1, 2], tf.int64),
                                pp, 8)
  count = int(got["mask"].numpy().sum())
  assert count == np.prod(got["grid"].numpy()) and got["patches"].shape == (30, 192)
  assert -1 <= got["patches"].numpy().min() and got["patches"].numpy().max() <= 1
  assert not got["patches"].numpy()[count:].any()


class Config(dict):
  """The pp keys a NaFlex train crop reads (a ConfigDict's get and attributes)."""
  __getattr__ = dict.__getitem__
