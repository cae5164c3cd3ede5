"""Masked patch prediction: corruption statistics, targets, losses, eval step, checks,
export (vit_facts.md section 8; paper 4.6 and App. B.1.2)."""

import functools
import math

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from helpers import load_module
from vit_jax.families.vit import masked_patch_model
from vit_jax.training import objectives
from vit_jax.training.evaluators import classification
from vit_jax.training.objectives import mpp


def within(observed, p, n, sigmas=4.5):
  """|observed share - p| within `sigmas` binomial standard deviations of n draws."""
  return abs(observed - p) <= sigmas * math.sqrt(p * (1 - p) / n)


_sample = jax.jit(mpp.sample_corruption, static_argnums=(1, 2))


def draw(num_images, num_patches, seed=0, **settings):
  keys = jax.random.split(jax.random.PRNGKey(seed), num_images)
  return jax.device_get(_sample(keys, num_patches, mpp.Settings(**settings)))


def test_half_of_each_image_is_corrupted_80_10_10():
  images, patches = 2000, 64
  c = draw(images, patches)
  assert (c.corrupted.sum(axis=1) == 32).all()  # exactly half of every image
  per_position = c.corrupted.mean(axis=0)  # and every position equally often
  assert all(within(share, 0.5, images) for share in per_position), per_position
  corrupted = c.corrupted.sum()
  mask, rand = c.replace_mask.sum(), c.replace_random.sum()
  assert within(mask / corrupted, 0.8, corrupted)
  assert within(rand / corrupted, 0.1, corrupted)
  assert within((corrupted - mask - rand) / corrupted, 0.1, corrupted)  # kept unchanged
  assert not (c.replace_mask & c.replace_random).any()
  assert not ((c.replace_mask | c.replace_random) & ~c.corrupted).any()


def test_random_replacement_is_another_patch_of_the_same_image():
  patches = 16
  c = draw(3000, patches)
  own = np.arange(patches)[None]
  assert (c.source != own).all() and c.source.min() == 0 and c.source.max() == patches - 1
  # Uniform over the 15 other positions.
  counts = np.bincount((c.source - own).ravel() % patches, minlength=patches)[1:]
  assert all(within(n / c.source.size, 1 / 15, c.source.size) for n in counts)


@pytest.mark.parametrize("rate, patches, expected", [(0.15, 196, 29), (0.5, 196, 98),
                                                     (0.5, 15, 8), (1.0, 4, 4)])
def test_corrupted_count_is_the_rate_rounded(rate, patches, expected):
  c = draw(50, patches, corrupt_rate=rate)
  assert (c.corrupted.sum(axis=1) == expected).all()


def test_fractions_are_configurable():
  c = draw(500, 16, replace_mask=0.0, replace_random=1.0, keep=0.0)
  assert (c.replace_random == c.corrupted).all() and not c.replace_mask.any()


def test_corruption_replaces_embeddings_as_drawn():
  x = jnp.arange(2 * 4 * 3, dtype=jnp.float32).reshape(2, 4, 3)
  mask = jnp.full((1, 1, 3), -1.0)
  c = masked_patch_model.Corruption(
      corrupted=jnp.array([[1, 1, 1, 0], [0, 0, 0, 0]], bool),
      replace_mask=jnp.array([[1, 0, 0, 0], [0, 0, 0, 0]], bool),
      replace_random=jnp.array([[0, 1, 0, 0], [0, 0, 0, 0]], bool),
      source=jnp.array([[1, 3, 0, 0], [1, 2, 3, 0]], jnp.int32))
  out = masked_patch_model.apply_corruption(x, c, mask)
  np.testing.assert_array_equal(out[0, 0], [-1, -1, -1])  # [mask]
  np.testing.assert_array_equal(out[0, 1], x[0, 3])  # patch 3 of the same image
  np.testing.assert_array_equal(out[0, 2:], x[0, 2:])  # kept, and uncorrupted
  np.testing.assert_array_equal(out[1], x[1])


# --- Targets ----------------------------------------------------------------------------------


def from_uint8(pixels):
  """uint8 pixels -> the pipeline's model input in [-1, 1]."""
  return (jnp.asarray(pixels, jnp.float32) - 127.5) / 127.5


def solid(rgb, side=4):
  return from_uint8(np.broadcast_to(np.asarray(rgb, np.uint8), (1, side, side, 3)))


@pytest.mark.parametrize("rgb, expected", [((255, 0, 0), 7 * 64), ((0, 255, 0), 7 * 8),
                                           ((0, 0, 255), 7), ((255, 255, 255), 511),
                                           ((0, 0, 0), 0), ((128, 64, 31), 4 * 64 + 2 * 8 + 0)])
def test_mean_color_of_solid_patches(rgb, expected):
  assert int(mpp.mean_color_target(solid(rgb), 4)[0, 0, 0]) == expected


def test_3_bit_classes_are_the_top_3_bits_of_the_8_bit_mean():
  values = np.arange(256, dtype=np.uint8)
  pixels = np.broadcast_to(values[:, None, None, None], (256, 2, 2, 3))
  ids = np.asarray(mpp.mean_color_target(from_uint8(pixels), 2)[:, 0, 0])
  top = values.astype(np.int64) >> 5
  np.testing.assert_array_equal(ids, top * 64 + top * 8 + top)


def test_mean_color_of_a_gradient_and_the_patch_order():
  ramp = np.zeros((1, 4, 8, 3), np.float32)  # two 4x4 patches side by side
  ramp[..., 0] = np.linspace(0, 1, 8)[None, None, :]  # red 0 -> 1 left to right
  target = np.asarray(mpp.mean_color_target(jnp.asarray(ramp * 2 - 1), 4))[0, :, 0]
  # Means 3/14 and 11/14 of full red: bins 1 and 6; green and blue 0.
  np.testing.assert_array_equal(target, [1 * 64, 6 * 64])
  quad = np.zeros((1, 8, 8, 3), np.uint8)
  quad[:, :4, 4:] = 255  # top right white: patch 1 in row-major order
  np.testing.assert_array_equal(mpp.mean_color_target(from_uint8(quad), 4)[0, :, 0],
                                [0, 511, 0, 0])


def test_color_bits_set_the_number_of_classes():
  assert int(mpp.mean_color_target(solid((255, 255, 255)), 4, bits=1)[0, 0, 0]) == 7
  assert int(mpp.mean_color_target(solid((255, 0, 0)), 4, bits=2)[0, 0, 0]) == 3 * 16


def test_downsized_4x4_target_cells_in_row_major_order():
  patch = np.zeros((1, 8, 8, 3), np.uint8)  # one 8 px patch, 2x2 pixels a cell
  patch[0, 0:2, 6:8] = (255, 0, 0)  # cell (0, 3): red
  patch[0, 6:8, 0:2] = (0, 0, 255)  # cell (3, 0): blue
  patch[0, 2, 2] = (200, 200, 200)  # a quarter of cell (1, 1): mean 50 -> bin 1
  target = np.asarray(mpp.downsized_target(from_uint8(patch), 8))
  assert target.shape == (1, 1, 16)
  expected = np.zeros(16, np.int64)
  expected[3], expected[12], expected[5] = 448, 7, 64 + 8 + 1
  np.testing.assert_array_equal(target[0, 0], expected)
  with pytest.raises(ValueError, match="4x4"):
    mpp.downsized_target(from_uint8(patch), 6)


def test_l2_target_is_the_patch_in_input_scale():
  images = jax.random.uniform(jax.random.PRNGKey(0), (2, 8, 12, 3), minval=-1, maxval=1)
  target = mpp.l2_patch_target(images, 4)
  assert target.shape == (2, 6, 1, 48)
  np.testing.assert_array_equal(target[1, 4, 0], np.asarray(images[1, 4:8, 4:8]).ravel())


@pytest.mark.parametrize("target, shape", [("mean_color", (1, 512)),
                                           ("downsized_4x4", (16, 512)),
                                           ("l2_patch", (1, 8 * 8 * 3))])
def test_losses_are_low_and_correct_for_the_right_prediction(target, shape):
  settings = mpp.Settings(target=target)
  assert mpp.prediction_shape(settings, 8) == shape
  images = jax.random.uniform(jax.random.PRNGKey(1), (2, 16, 16, 3), minval=-1, maxval=1)
  (loss, correct), (bad_loss, bad_correct) = right_and_wrong_losses(images, settings)
  assert loss.shape == correct.shape == (2, 4)
  assert float(loss.max()) < 1e-6 and float(correct.min()) == 1.0
  assert float(bad_loss.min()) > 0.01 and float(bad_correct.mean()) < 0.5


@functools.partial(jax.jit, static_argnums=1)
def right_and_wrong_losses(images, settings):
  """patch_losses of the right prediction of 8 px patches and of a wrong one (the right one
  rolled by a class), in one compiled program rather than op by op."""
  if settings.target == "l2_patch":
    right = mpp.l2_patch_target(images, 8)
  else:
    truth = (mpp.mean_color_target(images, 8) if settings.target == "mean_color"
             else mpp.downsized_target(images, 8))
    right = 30.0 * jax.nn.one_hot(truth, 512)
  wrong = jnp.roll(right, 1, axis=-1)
  return (mpp.patch_losses(right, images, 8, settings),
          mpp.patch_losses(wrong, images, 8, settings))


# --- Eval step, checks, export ----------------------------------------------------------------


def tiny_mpp(**settings):
  config = ml_collections.ConfigDict({"model_name": "ViT-Ti_16", "mpp": settings})
  overrides = dict(patch_size=4, hidden_size=16, mlp_dim=32, num_heads=2, num_layers=1)
  return mpp.create_model(config, overrides), config


def test_eval_sums_are_deterministic_per_example_and_skip_padding():
  module, config = tiny_mpp()
  images = jax.random.uniform(jax.random.PRNGKey(2), (6, 16, 16, 3), minval=-1, maxval=1)
  params = jax.jit(module.init)(jax.random.PRNGKey(0), images[:1])["params"]  # not op by op
  params["mpp_head"]["kernel"] = jax.random.normal(jax.random.PRNGKey(3),
                                                   params["mpp_head"]["kernel"].shape)
  eval_step = jax.jit(mpp.make_eval_step(module, config))
  mask = jnp.array([1, 1, 1, 1, 0, 0], jnp.float32)
  sums = eval_step(params, {"image": images, "label": jnp.zeros(6, jnp.int32), "mask": mask})
  assert float(sums["examples"]) == 4 * 8  # 8 of 16 patches in each of 4 real rows
  again = eval_step(params, {"image": images, "label": jnp.ones(6, jnp.int32), "mask": mask})
  # The same examples in another order and batch: the same sums (the corruption follows
  # each example's pixels); labels are not read.
  order = jnp.array([3, 1, 0, 2])
  alone = eval_step(params, {"image": images[order], "label": jnp.zeros(4, jnp.int32),
                             "mask": jnp.ones(4)})
  for key in sums:
    np.testing.assert_allclose(again[key], sums[key])
    np.testing.assert_allclose(alone[key], sums[key], rtol=1e-5)
  assert 0 < float(sums["loss_sum"]) and 0 <= float(sums["correct"]) <= 32


BAD_SETTINGS = [
    ({"mpp.target": "mean_colour"}, "unknown config.mpp.target"),
    ({"mpp.corrupt_rate": 0.0}, "corrupt_rate"),
    ({"mpp.keep": 0.2}, "add up to 1"),
    ({"mpp.color_bits": 9}, "color_bits"),
    ({"mpp.colour_bits": 3}, "unknown config.mpp key"),
    ({"pretrained": "ViT-B_16"}, "from scratch"),
    ({"model.representation_size": 64}, "pre_logits"),
    ({"model_name": "R50+ViT-B_16", "model.patch_size": 1}, "hybrid"),
    ({"mpp.target": "downsized_4x4", "model.patch_size": 6}, "divisible by 4"),
    ({"mpp.corrupt_rate": 0.01}, "corrupts no patch"),
]


@pytest.mark.parametrize("change, message", BAD_SETTINGS)
def test_settings_mpp_cannot_run_are_refused(change, message):
  config = load_module("mpp.py").get_config("digits")
  objectives.get(config).check(config)  # the digits config passes
  for path, value in change.items():
    *parents, key = path.split(".")
    node = config
    for parent in parents:
      node = node[parent]
    setattr(node, key, value)
  with pytest.raises(ValueError, match=message):
    objectives.get(config).check(config)


def test_objective_registry():
  assert objectives.get(ml_collections.ConfigDict()).name == "classification"
  assert objectives.get(load_module("mpp.py").get_config("digits")).name == "mpp"
  with pytest.raises(ValueError, match="choose one of classification, mpp"):
    objectives.get(ml_collections.ConfigDict({"objective": "simclr"}))


def test_export_drops_the_mpp_parts_and_adds_a_zero_one_class_head():
  module, _ = tiny_mpp()
  params = jax.device_get(jax.jit(module.init)(jax.random.PRNGKey(0),
                                               jnp.zeros((1, 16, 16, 3)))["params"])
  exported = mpp.export_backbone(params)
  assert set(exported) == {"embedding", "cls", "Transformer", "head"}
  assert exported["head"]["kernel"].shape == (16, 1) and not exported["head"]["kernel"].any()
  assert exported["head"]["bias"].shape == (1,) and not exported["head"]["bias"].any()


def test_paper_config():
  config = load_module("mpp.py").get_config("imagenet2012")
  assert (config.objective, config.model_name, config.pp.crop) == ("mpp", "ViT-B_16", 224)
  assert (config.optimizer, config.adam_b1, config.adam_b2, config.base_lr) == (
      "adamw", 0.9, 0.999, 2e-4)
  assert (config.batch, config.warmup_steps, config.decay_type, config.total_steps) == (
      4096, 10_000, "cosine", 1_000_000)
  assert config.weight_decay == 0.1 and config.pretrained is None
  assert (config.mpp.target, config.mpp.corrupt_rate, config.mpp.color_bits) == (
      "mean_color", 0.5, 3)
  assert (config.mpp.replace_mask, config.mpp.replace_random, config.mpp.keep) == (0.8, 0.1, 0.1)
  assert not config.evals  # ImageNet's ReaL / V2 sets judge class predictions
  classification.check(config, objectives.get(config).predicts_classes)
  digits = load_module("mpp.py").get_config("digits")
  demo = load_module("demo.py").get_config()
  assert digits.model == demo.model and digits.dataset == "digits"
  assert digits.fewshot.datasets == ("digits",)
