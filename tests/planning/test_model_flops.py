"""vit_jax.planning.model_flops: an image model's FLOPs per image, an image-text pair's per
pair tower by tower, a locked tower counted forward only in a training step."""

import jax
import pytest

import helpers
from vit_jax.models import family_registry, model_config
from vit_jax.planning import model_flops
from vit_jax.training import objectives


def built(config):
  """(module, abstract params) as the objective creates the model."""
  module, _ = objectives.get(config).create_model(config, 10, load_pretrained=False)
  sample = objectives.sample_inputs(objectives.get(config), config, None)
  params = jax.eval_shape(module.init, jax.random.PRNGKey(0), *sample)["params"]
  return module, params


def test_a_pair_is_counted_tower_by_tower_and_a_locked_tower_forward_only():
  config = helpers.pair_config()
  module, params = built(config)
  parts = model_flops.forward_by_part(module, config)
  image_tower = model_config.model_from_config(config, 0)
  assert parts["img"] == family_registry.geometry(image_tower).flops_per_image(
      image_tower, config.pp.crop)
  # One block of 32 over 8 tokens: 2 x 8 x (4 x 32^2 + 2 x 32 x 64) + 4 x 8^2 x 32 FLOPs,
  # and its 32 x 32 head on the pooled token: 2 x 32^2.
  assert parts["txt"] == 2 * 8 * (4 * 32**2 + 2 * 32 * 64) + 4 * 8**2 * 32 + 2 * 32**2
  assert model_flops.example(module) == model_flops.PAIR
  assert model_flops.forward(module, config) == parts["img"] + parts["txt"]
  assert model_flops.train(module, config, params) == 3 * (parts["img"] + parts["txt"])
  locked = helpers.pair_config(freeze="^img/")  # LiT: the image tower runs no backward
  assert model_flops.train(module, locked, params) == parts["img"] + 3 * parts["txt"]
  # Frozen only until a step: its backward pass runs from then on, so it counts.
  later = helpers.pair_config(freeze="^img/", freeze_steps=10)
  assert model_flops.train(module, later, params) == 3 * (parts["img"] + parts["txt"])


def test_an_image_model_is_counted_per_image_three_passes_in_training():
  config = helpers.demo_config()
  module, params = built(config)
  forward = family_registry.geometry(module).flops_per_image(module, config.pp.crop)
  assert model_flops.example(module) == model_flops.IMAGE
  assert model_flops.forward_by_part(module, config) == {"": forward}
  assert model_flops.train(module, config, params) == pytest.approx(3 * forward)
