"""The source registry: which reader takes a config.dataset, and what it knows from
metadata alone."""

import pytest

from helpers import make_config
from vit_jax.data.sources import digits, registry


def test_class_count_reads_no_examples(folder):
  """The benchmark's head size for a config: from metadata, nothing prepared needed."""
  counts = {name: registry.class_count(make_config(name)) for name in
            ("digits", str(folder), "vtab/clevr_count", "cifar100")}
  assert counts == {"digits": 10, str(folder): 2, "vtab/clevr_count": 8, "cifar100": 100}
  with pytest.raises(ValueError, match="unknown dataset 'cifar-100'"):
    registry.class_count(make_config("cifar-100"))


@pytest.mark.parametrize("dataset, kind", [("vtab/dtd", registry.VtabTask),
                                           ("digits", registry.Digits),
                                           ("./my_images", registry.Folder),
                                           ("cifar10", registry.Tfds)])
def test_each_dataset_name_has_one_reader(dataset, kind):
  assert type(registry.find(make_config(dataset))) is kind


def test_an_eval_only_set_of_digits_is_its_test_split():
  split, names = registry.open_eval_source("digits", "ignored", make_config("digits"))
  assert names == list(digits.DIGITS_CLASSES) and len(split.labels) == digits.DIGITS_TEST_SIZE
  with pytest.raises(ValueError, match="needs a TFDS dataset"):
    registry.open_eval_source("digits", "test", make_config("digits"), "real_label")
