"""The source registry: which reader takes a config.dataset, what it knows from metadata
alone, and the contract every source answers, so that no stack asks a source's type."""

import importlib

import pytest

from helpers import make_config
from vit_jax.base import errors
from vit_jax.data.sources import digits, registry, source_contract


def test_class_count_reads_no_examples(folder):
  """The benchmark's head size for a config: from metadata, nothing prepared needed."""
  counts = {name: registry.class_count(make_config(name)) for name in
            ("digits", str(folder), "vtab/clevr_count", "cifar100")}
  assert counts == {"digits": 10, str(folder): 2, "vtab/clevr_count": 8, "cifar100": 100}
  with pytest.raises(ValueError, match="unknown dataset 'cifar-100'"):
    registry.class_count(make_config("cifar-100"))


@pytest.mark.parametrize("dataset, kind", [("vtab/dtd", "vtab_1k"), ("digits", "digits"),
                                           ("./my_images", "image_folder"),
                                           ("cifar10", "tfds_datasets")])
def test_each_dataset_name_has_one_reader(dataset, kind):
  found = registry.find(make_config(dataset))
  assert found is importlib.import_module(f"vit_jax.data.sources.{kind}").SOURCE


def test_every_kind_answers_the_source_contract():
  assert len(registry.sources()) == len(registry.KINDS)
  for source in registry.sources():
    assert isinstance(source, source_contract.Source), source
    assert source.loaders and set(source.loaders) <= {"tf", "grain"}, source


def test_a_source_refuses_a_loader_that_cannot_read_it_in_one_line(tmp_path):
  """Before anything is read: VTAB's labels are TensorFlow functions, shards are Grain's."""
  with pytest.raises(errors.InvalidInput, match=r"^config.dataset='vtab/dtd': VTAB tasks are "
                     r"read by tf.data; set config.loader='tf'$"):
    registry.open_source(make_config("vtab/dtd"), loader="grain")
  (tmp_path / "arrayrecord.json").write_text("{}")
  with pytest.raises(errors.InvalidInput, match=r"holds ArrayRecord shards, which the Grain "
                     r"loader reads: set config.loader='grain'$"):
    registry.open_source(make_config(str(tmp_path)), loader="tf")
  assert [registry.loader_for(make_config(name)) for name in
          (str(tmp_path), "digits", "vtab/dtd", "cifar10")] == ["grain", "tf", "tf", "tf"]


def test_a_label_feature_applies_to_tfds_datasets_only():
  config = make_config("digits")
  config.label_feature = "labels"
  with pytest.raises(errors.InvalidInput, match=r"^config.label_feature='labels' applies to "
                     "TFDS datasets only; digits has its own labels: drop the setting$"):
    registry.find(config)


def test_an_eval_only_set_of_digits_is_its_test_split():
  split, names = registry.open_eval_source("digits", "ignored", make_config("digits"),
                                           loader="tf")
  assert names == list(digits.DIGITS_CLASSES) and len(split.labels) == digits.DIGITS_TEST_SIZE
  with pytest.raises(ValueError, match="needs a TFDS dataset"):
    registry.open_eval_source("digits", "test", make_config("digits"), "real_label",
                              loader="grain")
