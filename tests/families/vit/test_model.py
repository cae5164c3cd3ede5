"""Numerics of the ViT modules (vit_facts.md section 2)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import traverse_util

from conftest import random_params, tiny_model
from vit_jax.models import attention, encoder_blocks


def images(batch=2, side=16, seed=0):
  return jax.random.uniform(jax.random.PRNGKey(seed), (batch, side, side, 3), minval=-1, maxval=1)


def test_released_parameter_names_and_shapes():
  params = jax.eval_shape(tiny_model().init, jax.random.PRNGKey(0), images())["params"]
  shapes = {k: v.shape for k, v in traverse_util.flatten_dict(params, sep="/").items()}
  block = "Transformer/encoderblock_1"
  assert shapes["cls"] == (1, 1, 32)
  assert shapes["embedding/kernel"] == (4, 4, 3, 32)
  assert shapes["Transformer/posembed_input/pos_embedding"] == (1, 17, 32)
  assert shapes[f"{block}/MultiHeadDotProductAttention_1/query/kernel"] == (32, 2, 16)
  assert shapes[f"{block}/MultiHeadDotProductAttention_1/out/kernel"] == (2, 16, 32)
  assert shapes[f"{block}/MlpBlock_3/Dense_0/kernel"] == (32, 64)
  assert f"{block}/LayerNorm_0/scale" in shapes and f"{block}/LayerNorm_2/bias" in shapes
  assert shapes["Transformer/encoder_norm/scale"] == (32,)


def test_initialisers():
  params = tiny_model().init(jax.random.PRNGKey(0), images())["params"]
  assert not np.any(params["head"]["kernel"]) and not np.any(params["head"]["bias"])
  assert not np.any(params["cls"])
  posemb = params["Transformer"]["posembed_input"]["pos_embedding"]
  assert 0.01 < float(jnp.std(posemb)) < 0.03
  biased = tiny_model(head_bias_init=-10.0).init(jax.random.PRNGKey(0), images())["params"]
  np.testing.assert_array_equal(biased["head"]["bias"], -10.0)


def manual_forward(params, x, num_heads):
  """An independent plain-jnp forward of the tiny token-classifier ViT."""
  def ln(v, p):
    mean = v.mean(-1, keepdims=True)
    var = ((v - mean) ** 2).mean(-1, keepdims=True)
    return (v - mean) / jnp.sqrt(var + 1e-6) * p["scale"] + p["bias"]
  emb = params["embedding"]
  x = jax.lax.conv_general_dilated(x, emb["kernel"], (4, 4), "VALID",
                                   dimension_numbers=("NHWC", "HWIO", "NHWC")) + emb["bias"]
  x = x.reshape(x.shape[0], -1, x.shape[-1])
  x = jnp.concatenate([jnp.broadcast_to(params["cls"], (x.shape[0], 1, x.shape[-1])), x], 1)
  x = x + params["Transformer"]["posembed_input"]["pos_embedding"]
  layer = 0
  while f"encoderblock_{layer}" in params["Transformer"]:
    p = params["Transformer"][f"encoderblock_{layer}"]
    att = p["MultiHeadDotProductAttention_1"]
    y = ln(x, p["LayerNorm_0"])
    q, k, v = (jnp.einsum("btd,dhe->bthe", y, att[n]["kernel"]) + att[n]["bias"]
               for n in ("query", "key", "value"))
    q = q / np.sqrt(q.shape[-1])
    w = jax.nn.softmax(jnp.einsum("bqhe,bkhe->bhqk", q, k), axis=-1)
    y = jnp.einsum("bhqk,bkhe->bqhe", w, v)
    x = x + jnp.einsum("bqhe,hed->bqd", y, att["out"]["kernel"]) + att["out"]["bias"]
    mlp = p["MlpBlock_3"]
    y = ln(x, p["LayerNorm_2"]) @ mlp["Dense_0"]["kernel"] + mlp["Dense_0"]["bias"]
    y = 0.5 * y * (1 + jnp.tanh(np.sqrt(2 / np.pi) * (y + 0.044715 * y**3)))
    x = x + y @ mlp["Dense_1"]["kernel"] + mlp["Dense_1"]["bias"]
    layer += 1
  x = ln(x, params["Transformer"]["encoder_norm"])[:, 0]
  return x @ params["head"]["kernel"] + params["head"]["bias"]


def test_forward_equals_an_independent_implementation():
  module = tiny_model()
  params = random_params(module, 16)
  x = images()
  ours = module.apply({"params": params}, x)
  np.testing.assert_allclose(ours, manual_forward(params, x, 2), rtol=1e-5, atol=1e-5)


def test_gap_classifier_has_no_class_token_and_averages_tokens():
  module = tiny_model(classifier="gap")
  params = random_params(module, 16)
  assert "cls" not in params
  assert params["Transformer"]["posembed_input"]["pos_embedding"].shape == (1, 16, 32)
  assert jax.jit(module.apply)({"params": params}, images()).shape == (2, 5)


def test_pre_logits_is_dense_plus_tanh():
  module = tiny_model(representation_size=8)
  params = random_params(module, 16)
  assert params["pre_logits"]["kernel"].shape == (32, 8)
  assert params["head"]["kernel"].shape == (8, 5)


@pytest.mark.parametrize("representation_size", [None, 8])
def test_representation_is_the_input_of_the_head(representation_size):
  module = tiny_model(representation_size=representation_size)
  params = random_params(module, 16)
  features = module.apply({"params": params}, images(), representation=True)
  assert features.shape == (2, representation_size or 32) and features.dtype == jnp.float32
  head = params["head"]
  np.testing.assert_allclose(features @ head["kernel"] + head["bias"],
                             module.apply({"params": params}, images()), rtol=1e-5, atol=1e-6)


def test_dropout_only_in_training():
  module = tiny_model(dropout_rate=0.5)
  params = random_params(module, 16)
  x = images()
  eval_a = module.apply({"params": params}, x)
  eval_b = module.apply({"params": params}, x, train=False)
  np.testing.assert_array_equal(eval_a, eval_b)
  train = module.apply({"params": params}, x, train=True, rngs={"dropout": jax.random.PRNGKey(1)})
  assert not np.allclose(train, eval_a)


def test_intermediates_expose_attention_and_block_outputs():
  module = tiny_model()
  params = random_params(module, 16)
  logits, state = module.apply({"params": params}, images(), mutable=["intermediates"])
  np.testing.assert_array_equal(logits, module.apply({"params": params}, images()))
  block = state["intermediates"]["Transformer"]["encoderblock_0"]
  weights = block["MultiHeadDotProductAttention_1"]["attention_weights"][0]
  assert weights.shape == (2, 2, 17, 17)
  np.testing.assert_allclose(weights.sum(-1), 1.0, rtol=1e-6)
  assert block["block_output"][0].shape == (2, 17, 32)


def test_bfloat16_compute_keeps_float32_params_and_logits():
  module = tiny_model(dtype=jnp.bfloat16)
  params = jax.eval_shape(module.init, jax.random.PRNGKey(0), images())["params"]
  assert all(p.dtype == jnp.float32 for p in jax.tree.leaves(params))
  params = random_params(module, 16)
  logits = jax.jit(module.apply)({"params": params}, images())  # one compile, not op by op
  assert logits.dtype == jnp.float32
  reference = tiny_model().apply({"params": params}, images())
  np.testing.assert_allclose(logits, reference, rtol=0.05, atol=0.05)


def test_heads_must_divide_hidden():
  with pytest.raises(ValueError, match="not divisible by num_heads"):
    tiny_model(num_heads=5).init(jax.random.PRNGKey(0), images())


def test_attention_module_matches_softmax_definition():
  layer = attention.SelfAttention(num_heads=2)
  x = jax.random.normal(jax.random.PRNGKey(0), (1, 3, 8))
  params = layer.init(jax.random.PRNGKey(1), x, deterministic=True)
  _, state = layer.apply(params, x, deterministic=True, mutable=["intermediates"])
  weights = state["intermediates"]["attention_weights"][0]
  p = params["params"]
  q = jnp.einsum("btd,dhe->bhte", x, p["query"]["kernel"]) + p["query"]["bias"][:, None]
  k = jnp.einsum("btd,dhe->bhte", x, p["key"]["kernel"]) + p["key"]["bias"][:, None]
  expected = jax.nn.softmax(jnp.einsum("bhqe,bhke->bhqk", q, k) / np.sqrt(4), axis=-1)
  np.testing.assert_allclose(weights, expected, rtol=1e-5, atol=1e-6)


def loss_and_grads(module, params, x):
  def loss(p):
    return jnp.mean(module.apply({"params": p}, x, train=True) ** 2)
  return jax.jit(jax.value_and_grad(loss))(params)  # eagerly, each op of the VJP compiles


@pytest.fixture(name="plain", scope="module")
def fixture_plain():
  """The plain tiny model's params and its logits, loss and gradients on images(): what
  every fast path must compute, computed once."""
  module = tiny_model()
  params = random_params(module, 16)
  x = images()
  return params, jax.jit(module.apply)({"params": params}, x), loss_and_grads(module, params, x)


def assert_same_function(fast, plain, to_fast=lambda p: p, to_plain=lambda p: p):
  """`fast` (the plain params converted by to_fast) computes plain's logits, loss and
  gradients."""
  params, logits, (loss, grads) = plain
  fast_params = to_fast(params)
  assert jax.tree.structure(jax.eval_shape(fast.init, jax.random.PRNGKey(0), images())[
      "params"]) == jax.tree.structure(fast_params)
  x = images()
  np.testing.assert_allclose(jax.jit(fast.apply)({"params": fast_params}, x), logits,
                             rtol=1e-5, atol=1e-6)
  fast_loss, fast_grads = loss_and_grads(fast, fast_params, x)
  np.testing.assert_allclose(fast_loss, loss, rtol=1e-5)
  # Gradients: float32 summation-order noise, judged against the largest gradient (the
  # key biases' gradients are zero in exact arithmetic and hold only noise).
  scale = max(float(np.abs(g).max()) for g in jax.tree.leaves(grads))
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5 * scale),
               to_plain(fast_grads), grads)


@pytest.mark.parametrize("overrides", [{"attention_impl": "dot_product"},
                                       {"attention_impl": "xla"},
                                       {"remat_policy": "full"}, {"remat_policy": "dots"},
                                       {"remat_policy": "dots_no_batch"}],
                         ids=lambda o: "-".join(map(str, o.values())))
def test_fast_paths_compute_the_same_function(plain, overrides):
  assert_same_function(tiny_model(**overrides), plain)


@pytest.mark.parametrize("remat_policy", ["none", "dots"])
def test_scan_over_layers_computes_the_same_function(plain, remat_policy):
  assert encoder_blocks.to_scan_layout(plain[0])["Transformer"]["encoderblock"]["MlpBlock_3"][
      "Dense_0"]["kernel"].shape == (2, 32, 64)
  assert_same_function(tiny_model(scan_layers=True, remat_policy=remat_policy), plain,
                       to_fast=encoder_blocks.to_scan_layout,
                       to_plain=encoder_blocks.to_block_layout)


def test_layout_conversion_round_trips_and_keeps_other_params():
  params = random_params(tiny_model(num_layers=12), 16)
  stacked = encoder_blocks.to_scan_layout(params)
  assert sorted(stacked["Transformer"]) == ["encoder_norm", "encoderblock", "posembed_input"]
  layer_11 = params["Transformer"]["encoderblock_11"]["LayerNorm_0"]["scale"]
  np.testing.assert_array_equal(stacked["Transformer"]["encoderblock"]["LayerNorm_0"]["scale"][11],
                                layer_11)  # numeric, not lexicographic, block order
  jax.tree.map(np.testing.assert_array_equal, encoder_blocks.to_block_layout(stacked), params)
  assert encoder_blocks.to_block_layout(params) is params
  assert encoder_blocks.to_scan_layout(stacked) is stacked


def test_scanned_intermediates_are_stacked_by_depth():
  module = tiny_model(scan_layers=True)
  params = encoder_blocks.to_scan_layout(random_params(tiny_model(), 16))
  _, state = module.apply({"params": params}, images(), mutable=["intermediates"])
  block = state["intermediates"]["Transformer"]["encoderblock"]
  weights = block["MultiHeadDotProductAttention_1"]["attention_weights"][0]
  assert weights.shape == (2, 2, 2, 17, 17)  # depth, batch, heads, queries, keys
  np.testing.assert_allclose(weights.sum(-1), 1.0, rtol=1e-6)


def test_dot_product_path_still_returns_attention_weights():
  module = tiny_model(attention_impl="dot_product")
  params = random_params(module, 16)
  _, state = module.apply({"params": params}, images(), mutable=["intermediates"])
  weights = state["intermediates"]["Transformer"]["encoderblock_1"][
      "MultiHeadDotProductAttention_1"]["attention_weights"][0]
  np.testing.assert_allclose(weights.sum(-1), 1.0, rtol=1e-6)


def test_unknown_fast_path_names():
  with pytest.raises(ValueError, match="unknown attention_impl 'flash'"):
    tiny_model(attention_impl="flash").init(jax.random.PRNGKey(0), images())
  with pytest.raises(ValueError, match="unknown remat_policy 'some'"):
    tiny_model(remat_policy="some").init(jax.random.PRNGKey(0), images())


def assert_xavier_uniform(kernel, fan_in, fan_out):
  """Bounded by sqrt(6 / (fan_in + fan_out)) with a uniform's std: a normal init of the
  same std (lecun_normal when fan_in == fan_out) exceeds the bound."""
  limit = np.sqrt(6 / (fan_in + fan_out))
  assert np.abs(kernel).max() <= limit
  assert abs(np.std(kernel) / (limit / np.sqrt(3)) - 1) < 0.05


def test_block_initialisers_are_the_references():
  """vit_facts.md section 2: xavier-uniform attention and MLP kernels, zero attention
  biases, normal(1e-6) MLP biases (these only matter when training from scratch)."""
  module = tiny_model(hidden_size=64, mlp_dim=256, num_heads=4)
  params = jax.jit(module.init)(jax.random.PRNGKey(0), images())["params"]  # one compile
  block = params["Transformer"]["encoderblock_0"]
  attention, mlp = block["MultiHeadDotProductAttention_1"], block["MlpBlock_3"]
  for name in ("query", "key", "value", "out"):
    assert_xavier_uniform(attention[name]["kernel"], 64, 64)
    assert not np.any(attention[name]["bias"])
  assert_xavier_uniform(mlp["Dense_0"]["kernel"], 64, 256)
  assert_xavier_uniform(mlp["Dense_1"]["kernel"], 256, 64)
  for dense in ("Dense_0", "Dense_1"):
    assert 0.5e-6 < np.std(mlp[dense]["bias"]) < 2e-6


def test_position_embedding_init_is_normal_0_02():
  posemb = encoder_blocks.AddPositionEmbs().init(jax.random.PRNGKey(0), jnp.zeros((1, 1025, 64)))
  assert abs(np.std(posemb["params"]["pos_embedding"]) / 0.02 - 1) < 0.02


@pytest.mark.parametrize("given, message", [
    (np.full((2, 16, 16, 3), 200, np.uint8), "images are uint8 pixels; the model takes floats "
     r"in \[-1, 1\], the range it was trained on: pass images / 127.5 - 1"),
    (np.zeros((2, 16, 16, 3), np.int32), "images are int32 pixels"),
    ([[[[0.0] * 3] * 16] * 16], "images must be an array .* got list: pass np.asarray"),
    (np.zeros((2, 3, 16, 16), np.float32), r"shape \(2, 3, 16, 16\); .* channels last "
     r"\(channels first\? transpose\(0, 2, 3, 1\)\)"),
    (np.zeros((16, 16, 3), np.float32), r"\(one image\? add a batch axis: images\[None\]\)"),
], ids=["uint8", "int32", "list", "nchw", "unbatched"])
def test_the_model_refuses_pixels_it_would_misread(given, message):
  module = tiny_model()
  params = random_params(module, 16)
  with pytest.raises(ValueError, match=message):
    module.apply({"params": params}, given)
