"""The embedded dataset: scikit-learn's 8x8 digits, the demo's and the tests' data
(no download, fixed split)."""

import numpy as np

from vit_jax.data.sources import source_contract
from vit_jax.data.splits import IndexedSplit

DIGITS_TEST_SIZE = 300  # the digits' test split: the first 300 of a permutation drawn
DIGITS_SPLIT_SEED = 0   # with this seed; the other 1,497 are the train split
DIGITS_CLASSES = tuple(str(d) for d in range(10))


def digits_source():
  """scikit-learn's 1,797 8x8 digits as uint8 RGB, split 1,497 train / 300 test.

  The split is fixed: permutation(1797) of default_rng(DIGITS_SPLIT_SEED), whose first
  DIGITS_TEST_SIZE examples are the test split.
  """
  from sklearn.datasets import load_digits  # only this source needs scikit-learn
  bunch = load_digits()
  gray = np.round(bunch.images * (255 / 16)).astype(np.uint8)
  pixels = np.repeat(gray[..., None], 3, axis=-1)
  labels = bunch.target.astype(np.int32)
  order = np.random.default_rng(DIGITS_SPLIT_SEED).permutation(len(labels))
  test, train = order[:DIGITS_TEST_SIZE], order[DIGITS_TEST_SIZE:]
  return (IndexedSplit(pixels[train], labels[train], "pixels"),
          IndexedSplit(pixels[test], labels[test], "pixels"), list(DIGITS_CLASSES))


class Digits:
  """config.dataset='digits'."""
  loaders = ("tf", "grain")
  takes_label_feature = False

  def handles(self, config) -> bool:
    return config.dataset == "digits"

  def open(self, config, loader):
    return digits_source()

  def class_count(self, config) -> int:
    return len(DIGITS_CLASSES)

  def open_eval(self, name, split, config, label_feature, loader):
    if name != "digits":
      return None
    source_contract.labels_only(name, label_feature)
    _, evaluation, class_names = digits_source()
    return evaluation, class_names


SOURCE = Digits()
