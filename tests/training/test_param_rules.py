"""A params tree's training rules (vit_jax.training.param_rules): those of the family that
holds the tree, one line where no family does or where it has no training rules; stacked
blocks found in params and train-state paths alike."""

import types

import pytest

from vit_jax.base import errors
from vit_jax.models import family_contract, family_registry
from vit_jax.training import param_rules


def test_the_family_that_holds_the_params_gives_the_rules():
  for family, params in (("vit", {"Transformer": {}, "embedding": {}, "head": {}}),
                         ("mixer", {"stem": {}, "MixerBlock_0": {}, "head": {}})):
    assert param_rules.of_params(params) is family_registry.get(family).training
    assert family_registry.get(family).training in param_rules.of_every_family()


def test_params_of_no_family_or_of_one_without_training_rules_are_one_line():
  with pytest.raises(errors.InvalidInput, match="^no model family holds parameters named w, "
                     r"b: register one \(vit_jax.models.family_registry.register\)$"):
    param_rules.of_params({"w": 1, "b": 2})
  family_registry.register(family_contract.Family(
      name="toy", title="toy", guide="docs/toy.md", module_types=(), names=None,
      released_file=types.SimpleNamespace(holds=lambda params: "toy" in params)))
  try:
    with pytest.raises(errors.InvalidInput, match=r"^the model is a toy model, which has no "
                       r"training \(docs/toy.md\)$"):
      param_rules.of_params({"toy": {}})
  finally:
    family_registry.unregister("toy")


@pytest.mark.parametrize("family, name, stacked", [
    ("vit", "Transformer/encoderblock/MlpBlock_3/Dense_0/kernel", True),
    ("vit", "opt_state/0/trace/Transformer/encoderblock/MlpBlock_3/Dense_0/kernel", True),
    ("vit", "Transformer/encoderblock_1/MlpBlock_3/Dense_0/kernel", False),
    ("vit", "Transformer/encoder_norm/scale", False),
    ("mixer", "MixerBlock/token_mixing/Dense_0/kernel", True),
    ("mixer", "params/MixerBlock/channel_mixing/Dense_1/bias", True),
    ("mixer", "MixerBlock_3/token_mixing/Dense_0/kernel", False),
])
def test_stacked_blocks_are_found_in_params_and_train_states(family, name, stacked):
  assert param_rules.is_stacked(family_registry.get(family).training, name) == stacked
