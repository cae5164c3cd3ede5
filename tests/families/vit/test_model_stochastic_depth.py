"""Stochastic depth in the ViT encoder (vit_jax.families.vit.model): per-example branch drops."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import init_params, tiny_model
from vit_jax.models import encoder_blocks
from vit_jax.models import model_config
from vit_jax.training import config_defaults

RATE = 0.5
BIG_BATCH = 4096  # drop frequencies within 5 binomial sigmas: +-0.04 at p = 0.5


def images(batch=4, side=8, seed=0):
  return jax.random.uniform(jax.random.PRNGKey(seed), (batch, side, side, 3), minval=-1,
                            maxval=1)


def train_apply(module, params, x, key, mutable=False):
  return jax.jit(lambda p, x, k: module.apply(
      {"params": p}, x, train=True, rngs={"dropout": k},
      mutable=["intermediates"] if mutable else False))(params, x, key)


def test_rates_grow_linearly_from_zero_to_the_rate():
  np.testing.assert_allclose(encoder_blocks.stochastic_depth_rates(0.1, 12),
                             np.linspace(0.0, 0.1, 12), rtol=1e-6)
  np.testing.assert_array_equal(encoder_blocks.stochastic_depth_rates(0.3, 1), [0.0])


def test_no_parameters_released_layout_unchanged():
  plain = jax.eval_shape(tiny_model().init, jax.random.PRNGKey(0), images())
  dropped = jax.eval_shape(tiny_model(stochastic_depth=RATE).init, jax.random.PRNGKey(0),
                           images())
  assert jax.tree.structure(plain) == jax.tree.structure(dropped)


@pytest.mark.parametrize("scan_layers", [False, True])
def test_exact_at_evaluation(scan_layers):
  module = tiny_model(stochastic_depth=RATE, scan_layers=scan_layers)
  params = init_params(tiny_model())
  params = encoder_blocks.to_scan_layout(params) if scan_layers else params
  off = tiny_model(scan_layers=scan_layers)
  x = images()
  np.testing.assert_allclose(jax.jit(module.apply)({"params": params}, x),
                             jax.jit(off.apply)({"params": params}, x), rtol=1e-6, atol=1e-7)


def test_deterministic_for_a_key_and_different_across_keys():
  module = tiny_model(stochastic_depth=RATE)
  params = init_params(module)
  x = images(batch=16)
  a = train_apply(module, params, x, jax.random.PRNGKey(1))
  np.testing.assert_array_equal(a, train_apply(module, params, x, jax.random.PRNGKey(1)))
  assert not np.allclose(a, train_apply(module, params, x, jax.random.PRNGKey(2)))
  assert not np.allclose(a, jax.jit(module.apply)({"params": params}, x))


@pytest.mark.parametrize("remat_policy", ["none", "dots"])
def test_scanned_and_unrolled_blocks_drop_the_same_branches(remat_policy):
  """Each block's key is split from one Encoder key, so scan_layers changes nothing but
  the compiled program (float32 rounding: a tolerance, not bit equality)."""
  unrolled = tiny_model(stochastic_depth=RATE, num_layers=3)
  scanned = tiny_model(stochastic_depth=RATE, num_layers=3, scan_layers=True,
                       remat_policy=remat_policy)
  params = init_params(unrolled)
  x = images(batch=32)
  out, state = train_apply(unrolled, params, x, jax.random.PRNGKey(6), mutable=True)
  scan_out, scan_state = train_apply(scanned, encoder_blocks.to_scan_layout(params), x,
                                     jax.random.PRNGKey(6), mutable=True)
  np.testing.assert_allclose(scan_out, out, rtol=1e-5, atol=1e-5)
  stacked = scan_state["intermediates"]["Transformer"][encoder_blocks.SCANNED_BLOCKS]
  for layer in range(3):
    block = state["intermediates"]["Transformer"][f"encoderblock_{layer}"]
    for name in ("stochastic_depth_attention", "stochastic_depth_mlp"):
      np.testing.assert_array_equal(stacked[name][0][layer], block[name][0])


def masks(state, layer, scan_layers, num_layers):
  """(attention, mlp) keep masks [batch] of block `layer` from the sown intermediates."""
  encoder = state["intermediates"]["Transformer"]
  block = (encoder[encoder_blocks.SCANNED_BLOCKS] if scan_layers
           else encoder[f"encoderblock_{layer}"])
  pick = (lambda a: a[layer]) if scan_layers else (lambda a: a)
  found = [np.asarray(pick(block[f"stochastic_depth_{branch}"][0]))
           for branch in ("attention", "mlp")]
  assert all(m.shape == (BIG_BATCH,) for m in found), num_layers
  return found


@pytest.mark.parametrize("scan_layers, remat_policy", [(False, "none"), (True, "none"),
                                                       (True, "dots"), (False, "full")])
def test_drop_frequency_grows_with_depth(scan_layers, remat_policy):
  layers = 3
  module = tiny_model(stochastic_depth=RATE, num_layers=layers, scan_layers=scan_layers,
                      remat_policy=remat_policy)
  params = init_params(tiny_model(num_layers=layers))
  params = encoder_blocks.to_scan_layout(params) if scan_layers else params
  _, state = train_apply(module, params, images(batch=BIG_BATCH), jax.random.PRNGKey(3),
                         mutable=True)
  for layer, rate in enumerate(encoder_blocks.stochastic_depth_rates(RATE, layers)):
    attention, mlp = masks(state, layer, scan_layers, layers)
    if layer == 0:
      assert attention.all() and mlp.all()  # the first block is never dropped
    for keep in (attention, mlp):
      assert abs((1.0 - keep.mean()) - rate) < 0.04, (layer, keep.mean())
  attention, mlp = masks(state, layers - 1, scan_layers, layers)
  assert 0.2 < np.mean(attention == mlp) < 0.8  # the two branches draw independently


def test_a_dropped_branch_adds_nothing_and_a_kept_one_is_scaled():
  """Last block (p = RATE) with a zero MLP: its output minus its input is 0 where the
  attention branch is dropped, and 1 / (1 - p) times the evaluation branch where kept."""
  module = tiny_model(stochastic_depth=RATE)
  params = init_params(module)
  mlp = params["Transformer"]["encoderblock_1"]["MlpBlock_3"]["Dense_1"]
  mlp["kernel"], mlp["bias"] = jnp.zeros_like(mlp["kernel"]), jnp.zeros_like(mlp["bias"])
  x = images(batch=64)
  _, state = train_apply(module, params, x, jax.random.PRNGKey(4), mutable=True)
  _, evaluated = jax.jit(lambda p, x: module.apply({"params": p}, x, mutable=["intermediates"]))(
      params, x)
  outputs = lambda s, i: np.asarray(s["intermediates"]["Transformer"][f"encoderblock_{i}"][
      "block_output"][0])
  np.testing.assert_array_equal(outputs(state, 0), outputs(evaluated, 0))  # block 0: p = 0
  branch = outputs(state, 1) - outputs(state, 0)
  reference = outputs(evaluated, 1) - outputs(evaluated, 0)
  keep = np.asarray(state["intermediates"]["Transformer"]["encoderblock_1"][
      "stochastic_depth_attention"][0])
  assert 0 < keep.sum() < len(keep)
  np.testing.assert_array_equal(branch[~keep], 0.0)
  np.testing.assert_allclose(branch[keep], reference[keep] / (1.0 - RATE), rtol=1e-4,
                             atol=1e-5)


@pytest.mark.parametrize("scan_layers", [False, True])
def test_gradients_flow_through_kept_branches(scan_layers):
  module = tiny_model(stochastic_depth=RATE, scan_layers=scan_layers, remat_policy="dots")
  params = init_params(tiny_model())
  params = encoder_blocks.to_scan_layout(params) if scan_layers else params
  x = images(batch=16)
  loss = lambda p: jnp.mean(module.apply({"params": p}, x, train=True,
                                         rngs={"dropout": jax.random.PRNGKey(5)}) ** 2)
  grads = jax.jit(jax.grad(loss))(params)
  assert all(np.isfinite(g).all() for g in jax.tree.leaves(grads))
  blocks = grads["Transformer"]
  kernels = ([blocks[encoder_blocks.SCANNED_BLOCKS]] if scan_layers
             else [blocks["encoderblock_0"], blocks["encoderblock_1"]])
  for block in kernels:
    assert np.abs(block["MlpBlock_3"]["Dense_0"]["kernel"]).max() > 0


@pytest.mark.parametrize("rate", [1.0, -0.1, 1.5])
def test_rate_out_of_range_is_one_line(rate):
  with pytest.raises(ValueError, match=r"^stochastic_depth=.* must be in \[0, 1\): [^\n]*$"):
    tiny_model(stochastic_depth=rate)


def test_config_key_reaches_the_model():
  config = config_defaults.get_config()
  assert config.model.stochastic_depth == 0.0
  config.model.stochastic_depth = 0.1
  assert model_config.model_from_config(config, num_classes=3).stochastic_depth == 0.1
  config.model.stochastic_depth = 1.0
  with pytest.raises(ValueError, match="^config.model: stochastic_depth=1.0 must be in"):
    model_config.check_config(config)
