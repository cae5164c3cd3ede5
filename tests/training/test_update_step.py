"""The generic train step: accumulation, optimizer, Polyak average (with the classification
loss; the losses themselves: tests/training/objectives/test_classification.py)."""

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from conftest import init_params, tiny_model
from vit_jax.training import optim, update_step
from vit_jax.training.objectives import classification

NUM_CLASSES = 5


def make_config(**overrides) -> ml_collections.ConfigDict:
  config = ml_collections.ConfigDict(dict(
      optimizer="sgd", base_lr=0.1, warmup_steps=0, total_steps=100, decay_type="constant",
      momentum=0.9, optim_dtype="float32", adam_b1=0.9, adam_b2=0.999, weight_decay=0.0,
      grad_norm_clip=1.0, accum_steps=1, loss="softmax_xent", label_smoothing=0.0,
      polyak_decay=0.0))
  config.update(overrides)
  return config


def classification_step(model, optimizer, config):
  return update_step.make_train_step(classification.make_batch_loss(model, config), optimizer,
                                    config)


def make_batch(size=8, seed=0):
  image_key, label_key = jax.random.split(jax.random.PRNGKey(seed))
  return {"image": jax.random.uniform(image_key, (size, 16, 16, 3), minval=-1, maxval=1),
          "label": jax.random.randint(label_key, (size,), 0, NUM_CLASSES)}


def run_steps(config, batch, num_steps=1):
  """(state, metrics per step) after `num_steps` jitted steps from fixed tiny params."""
  model = tiny_model(NUM_CLASSES)
  optimizer = optim.make_optimizer(config)
  state = update_step.create_train_state(init_params(model), optimizer)
  step_fn = jax.jit(classification_step(model, optimizer, config))
  history = []
  for _ in range(num_steps):
    state, metrics = step_fn(state, batch, jax.random.PRNGKey(1))
    history.append(jax.device_get(metrics))
  return state, history


def max_abs_diff(a, b) -> float:
  return max(float(jnp.max(jnp.abs(x - y))) for x, y in zip(jax.tree.leaves(a),
                                                             jax.tree.leaves(b)))


def test_accumulated_micro_batches_equal_one_big_batch():
  # No clipping here: it would hide gradients summed instead of averaged.
  batch, config = make_batch(), dict(base_lr=0.01, grad_norm_clip=0.0)
  big, (big_metrics,) = run_steps(make_config(accum_steps=1, **config), batch)
  accumulated, (acc_metrics,) = run_steps(make_config(accum_steps=4, **config), batch)
  assert max_abs_diff(big.params, accumulated.params) <= 1e-6
  assert acc_metrics["loss"] == pytest.approx(big_metrics["loss"], rel=1e-6)
  assert acc_metrics["grad_norm"] == pytest.approx(big_metrics["grad_norm"], rel=1e-5)
  assert int(accumulated.step) == 1


def test_batch_not_divisible_by_accum_steps_fails_at_trace_time():
  config = make_config(accum_steps=4)
  model = tiny_model(NUM_CLASSES)
  optimizer = optim.make_optimizer(config)
  state = update_step.create_train_state(init_params(model), optimizer)
  step_fn = classification_step(model, optimizer, config)
  with pytest.raises(ValueError, match="6 examples does not split into config.accum_steps=4"):
    jax.eval_shape(step_fn, state, make_batch(6), jax.random.PRNGKey(0))


def test_micro_batch_i_takes_rows_i_mod_k_so_each_device_shard_feeds_every_micro_batch():
  micro = update_step.split_micro_batches({"label": jnp.arange(8)}, 4)["label"]
  np.testing.assert_array_equal(micro, [[0, 4], [1, 5], [2, 6], [3, 7]])


def test_loss_decreases_and_metrics_follow_the_schedule():
  config = make_config(optimizer="adamw", base_lr=3e-3, warmup_steps=2, weight_decay=1e-4,
                       label_smoothing=0.1)
  state, history = run_steps(config, make_batch(), num_steps=6)
  losses = [m["loss"] for m in history]
  assert losses[-1] < losses[0] - 0.1, losses
  assert [float(m["lr"]) for m in history[:3]] == pytest.approx([0.0, 1.5e-3, 3e-3])
  assert all(m["grad_norm"] > 0 for m in history) and int(state.step) == 6


def test_one_hot_float_labels_train_like_int_labels():
  batch = make_batch()
  soft = dict(batch, label=jax.nn.one_hot(batch["label"], NUM_CLASSES))
  from_ints, _ = run_steps(make_config(accum_steps=2), batch)
  from_floats, _ = run_steps(make_config(accum_steps=2), soft)
  assert max_abs_diff(from_ints.params, from_floats.params) <= 1e-7


def test_polyak_average_is_the_exponential_moving_average_of_the_params():
  config = make_config(polyak_decay=0.75)
  model = tiny_model(NUM_CLASSES)
  optimizer = optim.make_optimizer(config)
  state = update_step.create_train_state(init_params(model), optimizer, polyak=True)
  step_fn = jax.jit(classification_step(model, optimizer, config), donate_argnums=0)
  expected = jax.device_get(state.params)
  for seed in range(3):
    state, _ = step_fn(state, make_batch(seed=seed), jax.random.PRNGKey(1))
    expected = jax.tree.map(lambda e, p: 0.75 * e + 0.25 * p, expected,
                            jax.device_get(state.params))
  assert max_abs_diff(state.polyak, expected) < 1e-6
  assert max_abs_diff(state.eval_params, expected) < 1e-6
  assert max_abs_diff(state.params, expected) > 1e-4  # the average lags the raw params
  # Off: no average is kept, and the raw parameters are what gets evaluated.
  plain = update_step.create_train_state(init_params(model), optimizer)
  assert plain.polyak is None and plain.eval_params is plain.params
