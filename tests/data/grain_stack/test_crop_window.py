"""The Grain loader's inception window against tf.data's sampler: the same distribution of
boxes (sizes and offsets), tested on the boxes themselves."""

import numpy as np
import pytest
import scipy.stats
import tensorflow as tf

from vit_jax.data.grain_stack import crop_window
from vit_jax.data.tf_stack import tf_preprocess

DRAWS = 3000


def tf_boxes(height: int, width: int) -> np.ndarray:
  """[DRAWS, 4] (top, left, h, w) of tf_preprocess.inception_window (tf.data's sampler)."""
  seeds = tf.stack([tf.range(DRAWS, dtype=tf.int64), tf.fill([DRAWS], tf.constant(11, tf.int64))],
                   axis=1)
  def box(seed):
    begin, size = tf_preprocess.inception_window(tf.constant([height, width, 3]), seed)
    return tf.concat([begin[:2], size[:2]], 0)
  draw = tf.function(lambda s: tf.map_fn(box, s, fn_output_signature=tf.int32))
  return draw(seeds).numpy()


def numpy_boxes(height: int, width: int) -> np.ndarray:
  """[DRAWS, 4] of the Grain loader's window (the inception preset's ranges)."""
  rng = np.random.default_rng(5)
  return np.array([crop_window.inception_window(height, width, rng) for _ in range(DRAWS)])


def features(boxes: np.ndarray, height: int, width: int) -> dict:
  top, left, h, w = boxes.T.astype(np.float64)
  return {"height": h, "width": w, "area": h * w / (height * width), "aspect": w / h,
          "top": top / np.maximum(height - h, 1), "left": left / np.maximum(width - w, 1)}


@pytest.mark.parametrize("height,width", [(375, 500), (200, 200), (40, 300)])
def test_boxes_have_tf_datas_distribution(height, width):
  """Two-sample Kolmogorov-Smirnov on each feature of 3,000 boxes from each sampler: with
  equal distributions a statistic above 0.05 has p < 0.005. The uniform-area sampler
  that the Grain loader used before (mean area 0.525 against TF's ~0.38) strays by 0.2."""
  ours, theirs = numpy_boxes(height, width), tf_boxes(height, width)
  for name, (a, b) in zip(features(ours, height, width),
                          zip(features(ours, height, width).values(),
                              features(theirs, height, width).values())):
    statistic = scipy.stats.ks_2samp(a, b).statistic
    assert statistic < 0.05, (name, statistic)
  for boxes in (ours, theirs):
    top, left, h, w = boxes.T
    assert (top + h <= height).all() and (left + w <= width).all()
    assert ((top < height - h) | (h == height)).all()  # TF never draws the last offset


def test_impossible_constraints_fall_back_to_the_whole_image():
  """10 x 1000: 5% of the area needs a height over 10 at aspect <= 4/3, so every attempt
  fails, in both samplers."""
  np.testing.assert_array_equal(numpy_boxes(10, 1000)[:50], [[0, 0, 10, 1000]] * 50)
  begin, size = tf_preprocess.inception_window(tf.constant([10, 1000, 3]), tf.constant([1, 2]))
  assert list(begin[:2].numpy()) == [0, 0] and list(size[:2].numpy()) == [10, 1000]


def test_window_depends_on_the_generator_alone():
  first = crop_window.inception_window(375, 500, np.random.default_rng(3))
  assert crop_window.inception_window(375, 500, np.random.default_rng(3)) == first
