"""FP8 dense layers (vit_jax.models.fp8): what they compute, their gradients, and the model
with config.model.fp8. On the CPU the FP8 dots run in a wider type on the same rounded
operands, so the tolerances here are FP8's (3 mantissa bits: ~6% per element)."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import vit_jax
from vit_jax.models import encoder_blocks, fp8

TINY = dict(num_classes=5, patch_size=8, hidden_size=64, mlp_dim=128, num_heads=4,
            num_layers=2)


def relative_error(approx, exact) -> float:
  return float(np.linalg.norm(np.asarray(approx) - exact) / np.linalg.norm(exact))


def cosine(a, b) -> float:
  a, b = np.ravel(a), np.ravel(b)
  return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def test_quantize_fills_the_format_and_keeps_zeros():
  x = jnp.array([[-3.0, 0.0, 1.5, 0.001]])
  q, scale = fp8.quantize(x, fp8.E4M3)
  assert q.dtype == fp8.E4M3
  assert float(jnp.max(jnp.abs(q.astype(jnp.float32)))) == float(jnp.finfo(fp8.E4M3).max)
  np.testing.assert_allclose(q.astype(jnp.float32) * scale, x, rtol=0.07)
  q, scale = fp8.quantize(jnp.zeros((2, 3)), fp8.E5M2)
  assert float(scale) == 1.0 and not np.any(np.asarray(q.astype(jnp.float32)))


def test_matmul_and_its_gradients_are_the_exact_ones_up_to_fp8_rounding():
  keys = jax.random.split(jax.random.PRNGKey(0), 3)
  x, kernel = jax.random.normal(keys[0], (64, 32)), jax.random.normal(keys[1], (32, 48))
  cotangent = jax.random.normal(keys[2], (64, 48))
  exact = x @ kernel
  assert relative_error(fp8.fp8_matmul(x, kernel), exact) < 0.08
  _, pullback = jax.vjp(fp8.fp8_matmul, x, kernel)
  dx, dk = pullback(cotangent)
  assert relative_error(dx, cotangent @ kernel.T) < 0.15
  assert relative_error(dk, x.T @ cotangent) < 0.15
  # Not the identity of the exact product: the operands really were rounded to FP8.
  assert relative_error(fp8.fp8_matmul(x, kernel), exact) > 1e-3


def test_dot_general_takes_dense_general_contractions_and_refuses_others():
  x = jax.random.normal(jax.random.PRNGKey(1), (2, 5, 4, 8))
  kernel = jax.random.normal(jax.random.PRNGKey(2), (4, 8, 16))
  numbers = (((2, 3), (0, 1)), ((), ()))
  out = fp8.dot_general(x, kernel, numbers)
  assert out.shape == (2, 5, 16) and out.dtype == jnp.float32
  assert relative_error(out, jax.lax.dot_general(x, kernel, numbers)) < 0.08
  with pytest.raises(ValueError, match="dense layer's contraction"):
    fp8.dot_general(x, kernel, (((0,), (0,)), ((), ())))


@pytest.fixture(name="images", scope="module")
def fixture_images():
  return jax.random.uniform(jax.random.PRNGKey(3), (4, 32, 32, 3), minval=-1, maxval=1)


@pytest.fixture(name="params", scope="module")
def fixture_params(images):
  """Random weights everywhere (a zero head would hide the blocks' gradients)."""
  params = jax.jit(vit_jax.create_model("ViT-Ti_16", **TINY).init)(jax.random.PRNGKey(4),
                                                                   images)
  leaves, tree = jax.tree.flatten(params)
  keys = jax.random.split(jax.random.PRNGKey(5), len(leaves))
  noisy = jax.jit(lambda leaves: [leaf + 0.05 * jax.random.normal(k, leaf.shape)
                                  for leaf, k in zip(leaves, keys)])  # one program
  return tree.unflatten(noisy(leaves))


def test_the_model_keeps_its_parameters_and_computes_close_to_exact_math(images, params):
  exact = vit_jax.create_model("ViT-Ti_16", **TINY)
  model = vit_jax.create_model("ViT-Ti_16", fp8=True, **TINY)
  assert jax.tree.structure(jax.eval_shape(model.init, jax.random.PRNGKey(4), images)) == (
      jax.tree.structure(params))
  assert relative_error(jax.jit(model.apply)(params, images),
                        jax.jit(exact.apply)(params, images)) < 0.1
  lowered = jax.jit(lambda p: model.apply(p, images)).lower(params).as_text()
  assert "f8E4M3FN" in lowered  # the dense layers really multiply in FP8


@pytest.mark.parametrize("layout", [dict(), dict(scan_layers=True, remat_policy="full")])
def test_gradients_reach_every_dense_kernel(images, params, layout):
  exact = vit_jax.create_model("ViT-Ti_16", **TINY)
  model = vit_jax.create_model("ViT-Ti_16", fp8=True, **TINY, **layout)
  model_params = {"params": encoder_blocks.to_scan_layout(params["params"])} if layout else params
  loss = lambda m, p: jnp.mean(jax.nn.log_softmax(m.apply(p, images))[:, 0])
  exact_grads = jax.jit(jax.grad(functools.partial(loss, exact)))(params)["params"]
  grads = jax.jit(jax.grad(functools.partial(loss, model)))(model_params)["params"]
  if layout:
    grads = encoder_blocks.to_block_layout(grads)
  block = lambda g: g["Transformer"]["encoderblock_1"]
  for path in (("MlpBlock_3", "Dense_0"), ("MlpBlock_3", "Dense_1"),
               ("MultiHeadDotProductAttention_1", "query"),
               ("MultiHeadDotProductAttention_1", "out")):
    got, want = block(grads)[path[0]][path[1]]["kernel"], block(exact_grads)[path[0]][path[1]][
        "kernel"]
    assert cosine(got, want) > 0.95, path
  assert cosine(grads["embedding"]["kernel"], exact_grads["embedding"]["kernel"]) > 0.95
