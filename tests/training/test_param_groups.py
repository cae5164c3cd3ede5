"""Layer-wise decay, lr_mults and frozen parameters in the optax chain
(vit_jax.training.param_groups), on the tiny 2-block ViT with one train step per case."""

import re

import jax
import numpy as np
import pytest
from flax import traverse_util

from conftest import init_params, tiny_model
from test_update_step import make_batch, make_config, run_steps, classification_step
from vit_jax.base import errors
from vit_jax.models import family_registry
from vit_jax.training import optim, param_groups, update_step
from vit_jax.training.objectives import classification

SGD = dict(momentum=0.0, grad_norm_clip=0.0, decay_type="constant", warmup_steps=0)


def flat(tree):
  return traverse_util.flatten_dict(jax.device_get(tree), sep="/")


def one_update(config, params, grads, jit=True):
  """The optimizer's first update; jitted, one program instead of hundreds of eager ops, but
  XLA then folds the constants lr * multiplier first (1 ulp apart from eager arithmetic)."""
  optimizer = optim.make_optimizer(config)
  update = lambda g, p: optimizer.update(g, optimizer.init(p), p)[0]
  return flat((jax.jit(update) if jit else update)(grads, params))


def gradients(params, seed=3):
  leaves, tree = jax.tree.flatten(params)
  keys = jax.random.split(jax.random.PRNGKey(seed), len(leaves))
  return jax.tree.unflatten(tree, [jax.random.normal(k, x.shape) for k, x in zip(keys, leaves)])


def test_off_is_plain_training_bit_for_bit():
  batch = make_batch()
  plain, plain_metrics = run_steps(make_config(), batch, num_steps=2)
  off, off_metrics = run_steps(make_config(layer_decay=1.0, lr_mults=(), freeze=""), batch,
                               num_steps=2)
  assert jax.tree.structure(off.opt_state) == jax.tree.structure(plain.opt_state)
  for a, b in zip(jax.tree.leaves((plain.params, plain.opt_state, plain_metrics)),
                  jax.tree.leaves((off.params, off.opt_state, off_metrics))):
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("scan_layers", [False, True])
def test_sgd_step_of_each_block_is_decay_power_times_undecayed(scan_layers):
  decay, layers = 0.5, 2
  params = init_params(tiny_model(scan_layers=scan_layers))
  grads = gradients(params)
  plain = one_update(make_config(**SGD), params, grads, jit=False)
  mults = (("head", 3.0),)
  decayed = one_update(make_config(layer_decay=decay, lr_mults=mults, **SGD), params, grads,
                       jit=False)
  for name, update in plain.items():
    if name.startswith("Transformer/encoderblock/"):  # stacked: block i along axis 0
      expected = np.stack([update[i] * np.float32(decay ** (layers - i))
                           for i in range(layers)])
    else:
      rules = family_registry.get("vit").training
      block = param_groups.block_index(rules, name)
      power = (layers - block if block is not None
               else 0 if re.search(rules.head_side, name) else layers + 1)
      expected = update * np.float32(decay ** power * (3.0 if name.startswith("head") else 1))
    np.testing.assert_array_equal(decayed[name], expected, err_msg=name)
  assert {"embedding/kernel", "cls", "Transformer/encoder_norm/scale"} <= set(plain)


def test_hybrid_stem_gets_the_embeddings_rate():
  params = init_params(tiny_model(resnet_stages=(), resnet_width=0.5, patch_size=2))
  grads = gradients(params)
  plain = one_update(make_config(**SGD), params, grads, jit=False)
  decayed = one_update(make_config(layer_decay=0.5, **SGD), params, grads, jit=False)
  np.testing.assert_array_equal(decayed["conv_root/kernel"],
                                plain["conv_root/kernel"] * np.float32(0.5 ** 3))


def test_frozen_parameters_stay_bit_identical_and_have_no_optimizer_state():
  batch = make_batch()
  config = make_config(optimizer="adamw", weight_decay=0.1, freeze="^(?!head/)")
  state, _ = run_steps(config, batch, num_steps=2)
  start = flat(init_params(tiny_model(5)))
  after = flat(state.params)
  for name in start:
    if name.startswith("head/"):
      assert np.abs(after[name] - start[name]).max() > 1e-2, name  # two Adam steps: ~lr each
    else:
      np.testing.assert_array_equal(after[name], start[name], err_msg=name)
  state_shapes = {x.shape for x in jax.tree.leaves(state.opt_state)}
  head_shapes = {start["head/kernel"].shape, start["head/bias"].shape, ()}
  assert state_shapes == head_shapes  # first and second moments of the head only
  stateful = sum(x.size for x in jax.tree.leaves(state.opt_state) if x.ndim)
  assert stateful == 2 * (start["head/kernel"].size + start["head/bias"].size)


def test_freeze_steps_unfreezes_at_that_step():
  batch = make_batch()
  config = make_config(freeze="^Transformer/", freeze_steps=2, **SGD)
  model = tiny_model(5)
  optimizer = optim.make_optimizer(config)
  state = update_step.create_train_state(init_params(model), optimizer)
  step = jax.jit(classification_step(model, optimizer, config))
  encoder = lambda s: flat(s.params)["Transformer/encoderblock_0/MlpBlock_3/Dense_0/kernel"]
  moved = []
  for _ in range(3):
    before = encoder(state)
    state, _ = step(state, batch, jax.random.PRNGKey(1))
    change = np.abs(encoder(state) - before).max()
    assert change == 0 or change > 1e-2, change  # frozen: not at all; training: a real step
    moved.append(bool(change))
  assert moved == [False, False, True]
  trains = param_groups.table_columns(state.params, config)["trains"]
  assert trains["Transformer/encoder_norm/scale"] == "from step 2" and trains["head/bias"] == "yes"


@pytest.mark.parametrize("overrides, message", [
    (dict(freeze="^nothing_here"), "config.freeze='^nothing_here' matches no parameter"),
    (dict(lr_mults=(("headd", 2.0),)), "config.lr_mults='headd' matches no parameter"),
])
def test_regex_that_matches_nothing_is_one_line(overrides, message):
  """Refused when the optimizer state is made: a run does that before it writes."""
  params = init_params(tiny_model(5))
  with pytest.raises(errors.InvalidInput, match="paths look like") as caught:
    optim.make_optimizer(make_config(**overrides)).init(params)
  assert message in str(caught.value) and "\n" not in str(caught.value)
  assert "Transformer/encoderblock_" in str(caught.value)


def test_a_freeze_that_leaves_nothing_to_train_is_one_line():
  """It ended well, having learned nothing; frozen until a step, it trains from then on."""
  params = init_params(tiny_model(5))
  with pytest.raises(errors.InvalidInput, match=r"config.freeze='\.' freezes every "
                     "parameter: nothing would train; narrow it"):
    param_groups.labels(params, make_config(freeze="."))
  later = param_groups.labels(params, make_config(freeze=".", freeze_steps=3))
  assert set(jax.tree.leaves(later)) == {param_groups.LATER}


@pytest.mark.parametrize("overrides, message", [
    (dict(layer_decay=0.0), "config.layer_decay=0.0 must be in (0, 1]"),
    (dict(freeze_steps=5), "config.freeze_steps=5 needs config.freeze set"),
    (dict(freeze="(", lr_mults=()), "config.freeze='(' is not a regular expression"),
    (dict(freeze="^Transformer/", freeze_steps=100), "config.freeze_steps=100 is not below "
     "config.total_steps=100: the frozen parameters would never train"),
    (dict(lr_mults=(("head", -1.0),)), "must be >= 0"),
    (dict(lr_mults=(("head", float("nan")),)), "config.lr_mults['head']=nan must be >= 0 and "
     "finite"),
    (dict(lr_mults=(("head", float("inf")),)), "config.lr_mults['head']=inf must be >= 0"),
])
def test_bad_settings_are_refused_in_one_line(overrides, message):
  config = make_config(layer_decay=1.0, lr_mults=(), freeze="", freeze_steps=None)
  config.update(overrides)
  with pytest.raises(errors.InvalidInput) as caught:
    param_groups.check(config)
  assert message in str(caught.value) and "\n" not in str(caught.value)


def test_frozen_parameters_get_no_gradient_and_the_head_the_same_one():
  model, batch = tiny_model(5), make_batch()
  config = make_config(freeze="^(?!head/)")
  loss = classification.make_batch_loss(model, config)
  params, key = init_params(model), jax.random.PRNGKey(0)
  plain = flat(jax.jit(jax.grad(loss))(params, batch, key))
  probe = flat(jax.jit(jax.grad(param_groups.without_frozen_gradients(loss, config)))(
      params, batch, key))
  for name, grad in probe.items():
    if name.startswith("head/"):
      np.testing.assert_array_equal(grad, plain[name])
    else:
      assert not np.any(grad), name
