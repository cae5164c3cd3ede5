"""The attention kernels: backend choice, cuDNN's even-token padding and its unpadded
inference route, checked against the softmax definition."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from attention_cases import attention_inputs, softmax_attention, values_and_grads
from vit_jax.families.vit import model as vit
from vit_jax.models import attention


def test_dot_product_picks_cudnn_flash_attention_only_where_it_runs(monkeypatch):
  monkeypatch.setattr(jax, "default_backend", lambda: "cpu")
  assert attention.attention_backend("dot_product", jnp.bfloat16) == "xla"
  monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
  assert attention.attention_backend("dot_product", jnp.bfloat16) == "cudnn"
  assert attention.attention_backend("dot_product", jnp.float16) == "cudnn"
  assert attention.attention_backend("dot_product", jnp.float32) == "xla"  # no float32 flash
  assert attention.attention_backend("xla", jnp.bfloat16) == "xla"


@pytest.mark.parametrize("tokens", [17, 18])
def test_padding_to_even_tokens_computes_the_same_attention(tokens):
  """The cuDNN route pads odd token counts and masks the pad; check that route on XLA."""
  inputs = attention_inputs(tokens)
  padded = lambda *qkv: attention.fused_attention(*qkv, "xla", pad_to_even=True)
  with jax.default_matmul_precision("highest"):  # float32, not TF32, on GPUs
    (got, got_grads), (want, want_grads) = values_and_grads(padded, softmax_attention, inputs)
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
  for got, want in zip(got_grads, want_grads):
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("tokens", [17, 18])
def test_unpadded_inference_route_computes_the_same_attention_and_gradients(tokens):
  """pad_for_gradients_only: the forward runs unpadded (no pad op unless gradients are
  taken), values and gradients equal the plain attention's."""
  inputs = attention_inputs(tokens)
  route = lambda *qkv: attention.fused_attention(*qkv, "xla", pad_to_even=True,
                                           pad_for_gradients_only=True)
  loss = lambda f: lambda *qkv: jnp.sum(jnp.sin(f(*qkv)))
  primitives = lambda f: {e.primitive.name for e in jax.make_jaxpr(f)(*inputs).eqns}
  assert "pad" not in primitives(route)
  grads = jax.grad(loss(route), argnums=(0, 1, 2))
  assert ("pad" in str(jax.make_jaxpr(grads)(*inputs))) == bool(tokens % 2)
  with jax.default_matmul_precision("highest"):
    (got, got_grads), (want, want_grads) = values_and_grads(route, softmax_attention, inputs)
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
  for got, want in zip(got_grads, want_grads):
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)


def test_unpadded_inference_is_used_only_without_training(monkeypatch):
  """The model asks for the unpadded forward at train=False and only then (asked while
  tracing: shapes are evaluated, nothing is compiled)."""
  calls = []
  real = attention.fused_attention
  monkeypatch.setattr(attention, "fused_attention",
                      lambda *a, **kw: calls.append(kw["pad_for_gradients_only"]) or real(*a, **kw))
  model = vit.VisionTransformer(num_classes=3, patch_size=4, hidden_size=8, mlp_dim=16,
                                num_heads=2, num_layers=1, attention_impl="xla")
  images = jnp.ones((1, 12, 12, 3))
  params = jax.eval_shape(model.init, jax.random.PRNGKey(0), images)["params"]
  trace = lambda module, train: jax.eval_shape(
      lambda p: module.apply({"params": p}, images, train=train), params)
  trace(model, train=False)
  trace(model, train=True)
  trace(model.clone(unpadded_inference=False), train=False)
  assert calls[-3:] == [True, False, False]


@pytest.mark.skipif(jax.default_backend() != "gpu", reason="cuDNN flash attention needs a GPU")
@pytest.mark.parametrize("pad_for_gradients_only", [False, True])
def test_cudnn_flash_attention_matches_xla_in_bfloat16(pad_for_gradients_only):
  inputs = attention_inputs(197, jnp.bfloat16)  # odd: the padded route
  def loss_and_grads(backend):
    attention = lambda *qkv: attention.fused_attention(
        *qkv, backend, pad_for_gradients_only=pad_for_gradients_only)
    loss = lambda *qkv: jnp.sum(jnp.sin(attention(*qkv).astype(jnp.float32)))
    return jax.value_and_grad(loss, argnums=(0, 1, 2))(*inputs)
  rel = lambda a, b: float(jnp.linalg.norm((a - b).astype(jnp.float32)) /
                           jnp.linalg.norm(b.astype(jnp.float32)))
  (got, got_grads), (want, want_grads) = loss_and_grads("cudnn"), loss_and_grads("xla")
  assert abs(float(got - want)) <= 1e-2 * (abs(float(want)) + 1)
  assert all(rel(a, b) < 1e-2 for a, b in zip(got_grads, want_grads))  # H100: ~3.5e-3
