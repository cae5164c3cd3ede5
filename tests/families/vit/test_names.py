"""Released model names and their parameter counts (vit_facts.md section 1)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vit_jax.families.vit import names as vit_names

from vit_jax.models import model_config

from vit_jax.models import family_registry
from helpers import load_module

PARAMS_AT_224_1000_CLASSES = {
    "ViT-Ti_16": 5_717_416, "ViT-S_16": 22_050_664, "ViT-B_16": 86_567_656,
    "ViT-L_16": 304_326_632, "ViT-H_14": 632_045_800, "ViT-B_8": 86_576_872,
    "ViT-S_32": 22_878_952, "ViT-B_32": 88_224_232, "ViT-L_32": 306_535_400,
    "ViT-S_16-gap-norep": 22_049_896, "ViT-B_16-gap-norep": 86_566_120,
    "R+ViT-Ti_16": 6_337_704, "R26+ViT-S_32": 36_431_912, "R26+ViT-B_32": 101_383_976,
    "R50+ViT-B_16": 98_659_112, "R50+ViT-L_32": 328_994_856,
}


def count_params(module, image_size=224):
  shapes = jax.eval_shape(module.init, jax.random.PRNGKey(0),
                          jnp.zeros((1, image_size, image_size, 3)))
  return sum(int(np.prod(leaf.shape)) for leaf in jax.tree.leaves(shapes))


def test_zoo_is_the_facts_table():
  assert set(vit_names.RELEASED) == set(PARAMS_AT_224_1000_CLASSES)


@pytest.mark.parametrize("name", sorted(PARAMS_AT_224_1000_CLASSES))
def test_parameter_count(name):
  module = family_registry.create_model(name, num_classes=1000)
  assert count_params(module) == PARAMS_AT_224_1000_CLASSES[name]


@pytest.mark.parametrize("short,released", [
    ("Ti_16", "ViT-Ti_16"), ("B_16", "ViT-B_16"), ("L_16", "ViT-L_16"), ("B_8", "ViT-B_8"),
    ("S_32", "ViT-S_32"), ("R_Ti_16", "R+ViT-Ti_16"), ("R26_S_32", "R26+ViT-S_32"),
    ("R50_L_32", "R50+ViT-L_32"), ("vit-b_16", "ViT-B_16"), ("r50+vit-b_16", "R50+ViT-B_16"),
    ("ViT-B/16", "ViT-B_16"), ("H/14", "ViT-H_14"), ("R50+ViT-B/16", "R50+ViT-B_16"),
])
def test_augreg_and_case_insensitive_names(short, released):
  assert family_registry.canonical_name(short) == released


def test_unknown_name_lists_close_matches():
  with pytest.raises(ValueError, match=r"unknown model name 'ViT-B_17'.*ViT-B_16"):
    family_registry.create_model("ViT-B_17", num_classes=10)


def test_unknown_override_is_rejected_with_valid_options():
  with pytest.raises(TypeError, match="unknown model option.*dropout.*valid options"):
    family_registry.create_model("ViT-B_16", num_classes=10, dropout=0.1)


def test_overrides_and_reference_dropout_defaults():
  assert family_registry.create_model("ViT-L_16", num_classes=10).dropout_rate == 0.1
  assert family_registry.create_model("ViT-B_16", num_classes=10).dropout_rate == 0.0
  model = family_registry.create_model("ViT-B_16", num_classes=10, representation_size=768)
  assert model.representation_size == 768


@pytest.mark.parametrize("name,side,grid", [
    ("ViT-B_16", 224, 14), ("ViT-B_16", 384, 24), ("ViT-H_14", 384, 27),
    ("R50+ViT-B_16", 384, 24), ("R26+ViT-S_32", 224, 7), ("R+ViT-Ti_16", 224, 7),
])
def test_token_grid_matches_the_model(name, side, grid):
  module = family_registry.create_model(name, num_classes=10)
  assert family_registry.token_grid(module, side) == grid
  shapes = jax.eval_shape(module.init, jax.random.PRNGKey(0), jnp.zeros((1, side, side, 3)))
  posemb = shapes["params"]["Transformer"]["posembed_input"]["pos_embedding"]
  assert posemb.shape[1] == grid * grid + 1


@pytest.mark.parametrize("name, options, message", [
    ("ViT-B_16", dict(num_classes="10"), "num_classes='10' must be a whole number: the size"),
    ("ViT-B_16", dict(num_classes=2.5), "num_classes=2.5 must be"),
    ("ViT-B_16", dict(num_classes=-3), "num_classes=-3 must be"),
    (None, dict(num_classes=10), "model name must be a string such as 'ViT-B_16', got None"),
    ("ViT-B_16", dict(num_classes=10, dropout_rate=1.5),
     r"dropout_rate=1.5 must be in \[0, 1\): the share of activations zeroed in training"),
    ("ViT-B_16", dict(num_classes=10, attention_dropout_rate=-0.1),
     r"attention_dropout_rate=-0.1 must be in \[0, 1\)"),
])
def test_out_of_range_options_are_one_line(name, options, message):
  with pytest.raises(ValueError, match=message):
    family_registry.create_model(name, **options)


def test_patch_size_of_a_config_is_its_override_else_the_model_names():
  assert model_config.patch_size(load_module("siglip2_so400m14.py").get_config()) == 14
  config = load_module("siglip2_b16.py").get_config()
  config.model.patch_size = None  # the demo configs' "not set"
  config.model_name = "ViT-B_32"
  assert model_config.patch_size(config) == 32
