"""RandAugment's graph ops equal the numpy ops (randaugment.py), op by op and as a policy."""

import os

import numpy as np
import pytest
import tensorflow as tf

from vit_jax.data import randaugment, randaugment_tf

GOLDEN = os.path.join(os.path.dirname(__file__), "randaugment_reference.npz")


@pytest.fixture(name="images", scope="module")
def fixture_images():
  """The golden file's photo crop (64 x 64) and colour noise of another shape."""
  with np.load(GOLDEN) as data:
    photo = data["image"]
  noise = np.random.default_rng(0).integers(0, 256, (37, 50, 3), dtype=np.uint8)
  return [photo, noise]


@pytest.mark.parametrize("name", randaugment.OPS)
def test_graph_ops_equal_numpy_ops(images, name):
  for image in images:
    for m in (0, 5, 10, 15, 20, 27):
      for negate in (False, True) if name in randaugment.GEOMETRIC else (False,):
        centre = (image.shape[0] // 3, image.shape[1] - 4)
        want = randaugment._apply(image, name, float(m), negate, centre)
        got = randaugment_tf.apply_op(tf.constant(image), name, m, negate, centre)
        np.testing.assert_array_equal(got.numpy(), want, err_msg=f"{name} M={m} negate={negate}")


def test_graph_policy_equals_numpy_policy(images):
  """The same draws (in numpy) from the same seed: the same images. (Eager: switch_case
  runs the drawn branch only; the traced form runs in tests/data/test_pipeline.py.)"""
  for seed in range(12):
    image = images[seed % 2]
    words = np.array([seed, 7 * seed + 1], np.int64)
    got = randaugment_tf.randaugment(tf.constant(image), 3, 15, tf.constant(words))
    np.testing.assert_array_equal(got.numpy(), randaugment.randaugment(image, 3, 15, words))


def test_graph_ops_need_a_static_uint8_image():
  with pytest.raises(ValueError, match="uint8 \\[H, W, 3\\] pixels of a static size"):
    randaugment_tf.apply_op(tf.zeros([4, 4, 3]), "Invert", 5)
