"""expected_shapes: the model is traced once per module and size in a process, and every
caller still gets its own dict, also for a module with a list attribute."""

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
