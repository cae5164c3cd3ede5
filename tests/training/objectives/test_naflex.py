"""NaFlex classification (vit_jax.training.objectives.naflex): the main job's own step on
synthetic NaFlex batches of mixed aspect ratios (patches, mask, grid) with a tiny MAP-pooled
model from scratch: the loss falls, micro-batches equal the whole batch, evaluation and
the pooled representation ignore the padding, the fine-tuning controls find the ViT's
parameter names, and what NaFlex cannot run is refused in one line."""

import jax
import ml_collections
import numpy as np
import pytest
from flax import traverse_util

from vit_jax.base import errors
from vit_jax.data import batch_spec, device_batches
from vit_jax.families.vit import naflex_model
from vit_jax.training import (config_defaults, lora_adapters, objectives, param_groups, sharding,
                              state_and_step, static_checks, update_step)

PATCH, BUDGET = 4, 12
# rows x columns of patches: wide, tall, square, a sliver; 8, 6, 9 and 3 of the 12 real.
SHAPES = [(2, 4), (3, 2), (3, 3), (1, 3)]


def tiny_config(**overrides):
  config = config_defaults.demo_config()
  config.model.update(patch_size=PATCH, hidden_size=16, mlp_dim=32, num_heads=2, num_layers=2,
                      classifier="map")
  config.pp.max_patches = BUDGET
  config.update({**dict(batch=8, batch_eval=8, accum_steps=1, warmup_steps=1, base_lr=1e-2,
                        total_steps=20), **overrides})
  return config


def naflex_batch(seed=0, shapes=SHAPES * 2, padding_value=0.0):
  """A host batch as the loaders give it: the label is whether the image is wider than tall
  (1) or not, plus a brightness cue, learnable from the patches and their grid."""
  rng = np.random.default_rng(seed)
  n = len(shapes)
  patches = np.full((n, BUDGET, PATCH * PATCH * 3), padding_value, np.float32)
  mask = np.zeros((n, BUDGET), np.int32)
  labels = np.zeros((n,), np.int32)
  for i, (rows, cols) in enumerate(shapes):
    labels[i] = int(cols > rows)
    real = rows * cols
    patches[i, :real] = rng.uniform(-1, 1, (real, PATCH * PATCH * 3)) * 0.2 + (
        0.5 if labels[i] else -0.5)
    mask[i, :real] = 1
  return {"image": {"patches": patches, "mask": mask,
                    "grid": np.asarray(shapes, np.int32)}, "label": labels}


@pytest.fixture(name="setup", scope="module")
def fixture_setup():
  config = tiny_config()
  mesh = sharding.make_mesh(config.mesh)
  objective = objectives.get(config)
  static_checks.check_static(config, mesh, objective)
  module, _ = objective.create_model(config, 2, load_pretrained=False)
  run = state_and_step.build(config, module, mesh, objective)
  return config, mesh, objective, module, run


def test_the_config_builds_a_naflex_vit_whose_spec_is_the_batch(setup):
  config, _, objective, module, run = setup
  assert isinstance(objective, objectives.naflex.NaFlexClassification)
  assert isinstance(module, naflex_model.NaFlexViT) and module.posemb_grid == 16 // PATCH
  spec = batch_spec.train_batch(config, 2, 8, patch_size=module.patch_size)
  host = naflex_batch()
  assert jax.tree.map(lambda a: (a.shape, a.dtype), host) == spec
  table = run.abstract_state.params["Transformer"]["posembed_input"]["pos_embedding"]
  assert table.shape == (1, 16, 16)


def test_the_loss_falls_on_mixed_aspect_ratios(setup):
  _, _, _, _, run = setup
  state = run.init(jax.random.PRNGKey(0))
  batch = device_batches.to_global(naflex_batch(), run.batch_sharding)  # nested, sharded
  assert batch["image"]["grid"].sharding == run.batch_sharding
  rng = jax.random.PRNGKey(1)
  losses = []
  for _ in range(12):
    state, metrics = run.step(state, batch, rng, run.placed_schedule())
    losses.append(float(metrics["loss"]))
  assert np.isfinite(losses).all()
  assert losses[-1] < 0.5 * losses[0], losses


def test_accumulation_equals_the_whole_batch(setup):
  """update_step's micro-batches of a nested batch: the mean loss and gradients of two
  halves (strided rows, each half mixing shapes) are the whole batch's."""
  config, _, objective, module, run = setup
  loss_and_grad = jax.value_and_grad(objective.make_batch_loss(module, config))
  params = run.init(jax.random.PRNGKey(0)).params
  batch = naflex_batch(seed=3)
  rng = jax.random.PRNGKey(2)
  whole = jax.jit(loss_and_grad)(params, batch, rng)
  halves = jax.jit(lambda p, b: update_step.accumulate_gradients(
      loss_and_grad, p, update_step.split_micro_batches(b, 2), rng))(params, batch)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-7),
               halves, whole)


def test_evaluation_and_the_representation_ignore_padding(setup):
  config, _, objective, _, run = setup
  params = run.init(jax.random.PRNGKey(0)).params
  eval_step = jax.jit(objective.make_eval_step(run.module, config))
  batch = naflex_batch()
  batch["mask"] = np.asarray([1, 1, 1, 1, 1, 1, 0, 0], np.float32)  # two padding rows
  other = naflex_batch(padding_value=9.0)  # other values where the patch mask is 0
  other["mask"] = batch["mask"]
  other["image"]["patches"][6:] = 5.0  # and other padding rows entirely
  first, second = eval_step(params, batch), eval_step(params, other)
  assert float(first["examples"]) == 6
  for key in ("loss_sum", "correct", "confusion"):
    np.testing.assert_allclose(first[key], second[key], rtol=1e-5, atol=1e-6)
  represent = jax.jit(lambda p, image: run.module.apply({"params": p}, image,
                                                       representation=True))
  features, padded = represent(params, batch["image"]), represent(params, other["image"])
  assert features.shape == (8, 16)
  np.testing.assert_allclose(features[:6], padded[:6], rtol=1e-5, atol=1e-6)


def test_fine_tuning_controls_find_the_vits_parameter_names(setup):
  run = setup[-1]
  params = jax.tree.map(lambda a: np.zeros(a.shape, a.dtype), run.abstract_state.params)
  config = tiny_config(layer_decay=0.5)
  mults = traverse_util.flatten_dict(param_groups.multipliers(params, config), sep="/")
  assert mults["Transformer/encoderblock_0/LayerNorm_0/scale"] == 0.25  # 0.5 ** (2 - 0)
  assert mults["embedding/kernel"] == 0.125 and mults["MAPHead_0/probe"] == 1.0
  lora = lora_adapters.settings(tiny_config(lora=ml_collections.ConfigDict(dict(
      rank=2, alpha=None, dropout=0.0, targets=config_defaults.get_config().lora.targets))))
  adapted = traverse_util.flatten_dict(lora_adapters.with_adapters(params, lora, 0), sep="/")
  assert sum("lora" in name for name in adapted) == 2 * 4 * 2  # q, k, v, out; A and B


@pytest.mark.parametrize("overrides, message", [
    ({"model.classifier": "gap"}, "classifier='map'"),
    ({"model.posemb": "sincos2d"}, "posemb='learn'"),
    ({"model.representation_size": 16}, "pre_logits"),
    ({"pp.mixup_alpha": 0.2}, "set mixup_alpha=0"),
    ({"pp.max_patches": -1}, "patch budget >= 1"),
    ({"pp.crop": 2}, "raise pp.crop"),
    ({"objective": "mpp"}, "not config.objective='mpp': pass --config.pp.max_patches=0 "),
    ({"model.flexi_patch_sizes": (4, 8)}, "not FlexiViT"),
    ({"model_name": "Mixer-S_16"}, "^config.model_name=Mixer-S_16 is an MLP-Mixer; NaFlex "),
])
def test_what_naflex_cannot_run_is_one_line(setup, overrides, message):
  _, mesh, _, _, _ = setup
  config = tiny_config()
  for key, value in overrides.items():
    section, _, name = key.rpartition(".")
    (config[section] if section else config)[name] = value
  with pytest.raises(errors.InvalidInput, match=message.replace("(", r"\(")) as raised:
    static_checks.check_static(config, mesh, objectives.get(config))
  assert "\n" not in str(raised.value)
