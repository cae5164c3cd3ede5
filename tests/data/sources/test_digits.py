"""The embedded digits: their fixed 1,497 / 300 split as uint8 RGB, and a batch of them."""

import numpy as np

from helpers import make_config, train
from vit_jax.data.tf_stack import tf_pipeline


def test_digits_source():
  dataset = tf_pipeline.open_dataset(make_config())
  assert (dataset.info.num_train, dataset.info.num_eval, dataset.info.num_classes) == (
      1497, 300, 10)
  assert dataset.train.data.shape == (1497, 8, 8, 3) and dataset.train.data.dtype == np.uint8
  assert dataset.train.data.max() == 255
  batch = train(dataset, num_steps=1)[0]
  assert batch["image"].shape == (8, 16, 16, 3) and batch["label"].dtype == np.int32
