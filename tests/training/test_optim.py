"""Schedules and the optax chain against the reference recipe (vit_facts.md section 6)."""

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
import pytest
from flax import traverse_util

from conftest import init_params, tiny_model
from vit_jax.training import optim

WARMUP, TOTAL, BASE = 100, 1_000, 0.03
STEPS = np.array([0, WARMUP // 2, WARMUP, (WARMUP + TOTAL) // 2, 800, TOTAL, TOTAL + 50])


def make_config(**overrides) -> ml_collections.ConfigDict:
  config = ml_collections.ConfigDict(dict(
      optimizer="sgd", base_lr=BASE, warmup_steps=WARMUP, total_steps=TOTAL,
      decay_type="cosine", linear_end=1e-5, momentum=0.9, optim_dtype="float32",
      adam_b1=0.9, adam_b2=0.999, weight_decay=0.0, grad_norm_clip=0.0))
  config.update(overrides)
  return config


def reference_lr(step, decay_type, linear_end=1e-5):
  """The reference code's formula, in float64 numpy."""
  progress = np.clip((step - WARMUP) / (TOTAL - WARMUP), 0.0, 1.0)
  if decay_type == "cosine":
    lr = BASE * 0.5 * (1.0 + np.cos(np.pi * progress))
  else:
    lr = linear_end + (BASE - linear_end) * (1.0 - progress)
  return lr * np.minimum(1.0, step / WARMUP)


@pytest.mark.parametrize("decay_type", ["cosine", "linear"])
def test_schedule_matches_reference_formula(decay_type):
  schedule = optim.make_schedule(make_config(decay_type=decay_type))
  got = np.array([schedule(step) for step in STEPS])
  np.testing.assert_allclose(got, reference_lr(STEPS, decay_type), rtol=1e-6, atol=1e-12)
  assert got[0] == 0.0 and got[2] == pytest.approx(BASE)
  end = 0.0 if decay_type == "cosine" else 1e-5
  assert got[-2] == pytest.approx(end, abs=1e-9) and got[-1] == got[-2]


@pytest.mark.parametrize("decay_type", ["cosine", "linear", "constant"])
@pytest.mark.parametrize("warmup", [WARMUP, 0])
def test_schedule_numbers_as_arguments_give_the_same_rates(decay_type, warmup):
  """The train step takes the schedule's numbers as arguments (one program for any length
  and rate): traced, they must give the rates the numbers folded in as constants give."""
  config = make_config(decay_type=decay_type, warmup_steps=warmup)
  folded = optim.make_schedule(config)
  traces = []

  @jax.jit
  def traced(numbers, step):
    traces.append(step)  # runs once per trace, not per call
    return optim.make_schedule(config, numbers)(step)

  numbers = optim.schedule_numbers(config)
  np.testing.assert_allclose([traced(numbers, step) for step in STEPS],
                             [folded(step) for step in STEPS], rtol=1e-6, atol=1e-12)
  longer = make_config(decay_type=decay_type, warmup_steps=warmup, total_steps=2 * TOTAL,
                       base_lr=2 * BASE)  # other numbers, same program
  np.testing.assert_allclose(
      [traced(optim.schedule_numbers(longer), step) for step in STEPS],
      [optim.make_schedule(longer)(step) for step in STEPS], rtol=1e-6, atol=1e-12)
  assert len(traces) == 1


def test_constant_schedule_and_no_warmup():
  schedule = optim.make_schedule(make_config(decay_type="constant"))
  np.testing.assert_allclose([schedule(s) for s in (WARMUP // 2, WARMUP, TOTAL)],
                             [BASE / 2, BASE, BASE], rtol=1e-6)
  cold = optim.make_schedule(make_config(warmup_steps=0))
  assert float(cold(0)) == pytest.approx(BASE)


def test_sgd_momentum_buffer_dtype_follows_optim_dtype():
  params = {"w": jnp.ones((3, 2))}
  for name, dtype in [("bfloat16", jnp.bfloat16), ("float32", jnp.float32)]:
    opt_state = optim.make_optimizer(make_config(optim_dtype=name)).init(params)
    buffers = [leaf for leaf in jax.tree.leaves(opt_state) if leaf.shape == (3, 2)]
    assert buffers and all(leaf.dtype == dtype for leaf in buffers)


def test_adam_first_moment_dtype_follows_optim_dtype():
  params = {"w": jnp.ones((3, 2))}
  config = make_config(optimizer="adamw", optim_dtype="bfloat16")
  opt_state = optim.make_optimizer(config).init(params)
  moments = sorted(leaf.dtype.name for leaf in jax.tree.leaves(opt_state)
                   if leaf.shape == (3, 2))
  assert moments == ["bfloat16", "float32"]  # mu in optim_dtype, nu stays float32


def test_weight_decay_mask_covers_kernels_only():
  params = jax.eval_shape(lambda: init_params(tiny_model()))
  mask = traverse_util.flatten_dict(optim.decay_mask(params), sep="/")
  decayed = {path for path, on in mask.items() if on}
  assert decayed == {path for path in mask if path.endswith("/kernel")}
  attention = "Transformer/encoderblock_0/MultiHeadDotProductAttention_1"
  assert f"{attention}/query/kernel" in decayed and "embedding/kernel" in decayed
  for kept in ("cls", "Transformer/posembed_input/pos_embedding", f"{attention}/query/bias",
               "Transformer/encoder_norm/scale", "head/bias"):
    assert not mask[kept], kept


def test_weight_decay_shrinks_kernels_by_lr_times_decay():
  params = {"dense": {"kernel": jnp.ones((2, 2)), "bias": jnp.ones((2,))}}
  config = make_config(weight_decay=0.5, warmup_steps=0, decay_type="constant", momentum=0.0)
  optimizer = optim.make_optimizer(config)
  zero_grads = jax.tree.map(jnp.zeros_like, params)
  updates, _ = optimizer.update(zero_grads, optimizer.init(params), params)
  np.testing.assert_allclose(updates["dense"]["kernel"], -BASE * 0.5, rtol=1e-6)
  np.testing.assert_array_equal(updates["dense"]["bias"], 0.0)


def test_gradient_clipping_caps_the_global_norm():
  params = {"a": jnp.zeros((4,)), "b": jnp.zeros((3, 3))}
  grads = {"a": jnp.full((4,), 3.0), "b": jnp.full((3, 3), -2.0)}  # global norm 7.2
  config = make_config(grad_norm_clip=1.0, warmup_steps=0, decay_type="constant")
  optimizer = optim.make_optimizer(config)
  updates, _ = optimizer.update(grads, optimizer.init(params), params)
  assert float(optax.tree.norm(updates)) == pytest.approx(BASE * 1.0, rel=1e-5)
  unclipped = optim.make_optimizer(make_config(warmup_steps=0, decay_type="constant"))
  updates, _ = unclipped.update(grads, unclipped.init(params), params)
  assert float(optax.tree.norm(updates)) == pytest.approx(BASE * np.sqrt(72.0), rel=1e-5)


def test_unknown_names_fail_with_the_valid_choices():
  with pytest.raises(ValueError, match="config.optimizer='lamb'; choose one of sgd, adam"):
    optim.make_optimizer(make_config(optimizer="lamb"))
  with pytest.raises(ValueError, match="config.decay_type='step'; choose one of cosine"):
    optim.make_schedule(make_config(decay_type="step"))
