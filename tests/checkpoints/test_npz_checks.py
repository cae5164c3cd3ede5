"""expected_shapes: the model is traced once per module and size in a process, and every
caller still gets its own dict, also for a module with a list attribute; side_pair: what an
image_size may be."""

import re

import numpy as np
import pytest

from conftest import tiny_model
from vit_jax.checkpoints import npz_checks


def traces():
  return npz_checks._cached_shapes.cache_info().misses  # pylint: disable=protected-access


def test_traced_once_per_module_and_size():
  before = traces()
  module, size = tiny_model(num_classes=7, hidden_size=24), (20, 28)  # no other test's
  first = npz_checks.expected_shapes(module, size)
  first["head/kernel"] = "changed by a caller"
  again = npz_checks.expected_shapes(tiny_model(num_classes=7, hidden_size=24), size)
  assert traces() == before + 1
  assert again["head/kernel"] == (24, 7)
  assert again["Transformer/posembed_input/pos_embedding"] == (1, 5 * 7 + 1, 24)
  larger = npz_checks.expected_shapes(module, 32)
  assert traces() == before + 2 and larger["Transformer/posembed_input/pos_embedding"][1] == 65


def test_a_module_with_a_list_attribute_is_traced_uncached():
  hybrid = dict(num_classes=3, resnet_stages=(1,), hidden_size=16)
  listed = tiny_model(**{**hybrid, "resnet_stages": [1]})  # unhashable
  before = traces()
  shapes = npz_checks.expected_shapes(listed, 32)
  assert traces() == before
  assert shapes == npz_checks.expected_shapes(tiny_model(**hybrid), 32)
  assert any(key.startswith("conv_root") for key in shapes)


def test_an_image_size_is_an_int_or_a_pair_of_ints():
  assert npz_checks.side_pair(np.int64(32)) == (32, 32) and npz_checks.side_pair([16, 8]) == (16, 8)
  for wrong in ("32", (32,), 32.0, True):  # '32' was unpacked as the pair (3, 2)
    with pytest.raises(npz_checks.ImageSizeError, match=re.escape(
        f"image_size={wrong!r} must be a whole number of pixels or a (height, width) pair")):
      npz_checks.side_pair(wrong)
