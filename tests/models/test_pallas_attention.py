"""The Pallas TPU flash-attention route, run on the CPU in Pallas's TPU interpret mode:
the same function as the softmax definition (values and gradients), with the token
padding masked, whole and split per shard over a mesh."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental.pallas import tpu as pltpu

from attention_cases import attention_inputs, softmax_attention, values_and_grads
from vit_jax.base import errors
from vit_jax.families.vit import model as vit
from vit_jax.models import attention, pallas_attention
from vit_jax.planning import compiler_readings
from vit_jax.training import sharding


def pallas_route(*qkv):
  return attention.fused_attention(*qkv, "pallas")


def test_padded_tokens_are_masked_and_gradients_match():
  """17 tokens in a block of 128, 111 of them padding (ViT's 197, 577, 1,370 tokens are
  never multiples of 128). Interpret mode runs the kernel's grid step by step: one block
  keeps this test cheap (the kernel's own tests cover many blocks)."""
  inputs = [t[:1] for t in attention_inputs(17)]
  assert pallas_attention.padded_tokens(17) == 128 and pallas_attention.padded_tokens(257) == 384
  with pltpu.force_tpu_interpret_mode(), jax.default_matmul_precision("highest"):
    (got, got_grads), (want, want_grads) = values_and_grads(pallas_route, softmax_attention,
                                                            inputs)
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
  for got, want in zip(got_grads, want_grads):
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_on_a_tpu_mesh_each_shard_runs_the_kernel_on_its_share():
  """Compiled for a v3-8 (compile-only devices): batch over 'data' x 'fsdp', heads over
  'tensor', one kernel per shard on its share and nothing gathered (XLA cannot split the
  kernel: without the shard_map it would gather q, k and v onto every core)."""
  pytest.importorskip("libtpu", reason="compiling for TPUs needs libtpu (the test extra)")
  v3_8 = compiler_readings.tpu_target("v3-8")
  mesh = sharding.make_mesh({"data": 4, "fsdp": 1, "tensor": 2}, devices=v3_8.devices)
  spec = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("data", None, "tensor"))
  inputs = [jax.ShapeDtypeStruct((8, 197, 4, 64), jnp.float32, sharding=spec)] * 3
  step = jax.jit(sharding.on_mesh(mesh, jax.grad(lambda *qkv: jnp.sum(pallas_route(*qkv)),
                                                 argnums=(0, 1, 2))))
  program = compiler_readings.compile_for(step, inputs, v3_8).as_text()
  kernels = [line for line in program.splitlines() if "tpu_custom_call" in line]
  assert kernels and all("f32[2,2,256,64]" in line for line in kernels)  # 8/4 images, 4/2 heads
  assert "all-gather" not in program


def test_the_model_with_pallas_attention_equals_the_softmax_model():
  model = vit.VisionTransformer(num_classes=3, patch_size=4, hidden_size=16, mlp_dim=16,
                                num_heads=2, num_layers=1, attention_impl="pallas")
  images = jax.random.uniform(jax.random.PRNGKey(1), (2, 12, 12, 3))
  reference = model.clone(attention_impl="softmax")
  params = jax.jit(reference.init)(jax.random.PRNGKey(0), images)["params"]
  with pltpu.force_tpu_interpret_mode():
    got = jax.jit(model.apply, static_argnames="train")({"params": params}, images, train=False)
  want = jax.jit(reference.apply, static_argnames="train")({"params": params}, images,
                                                           train=False)
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_pallas_is_refused_off_tpu_in_one_line():
  with pytest.raises(errors.InvalidInput, match="TPUs only.*attention_impl=dot_product"):
    attention.check_runs_on("pallas", "cpu")
  attention.check_runs_on("pallas", "tpu")
  attention.check_runs_on("dot_product", "cpu")


@pytest.mark.parametrize("tpu,dtype,inference,want", [
    ("v3-8", jnp.float32, True, "pallas"), ("v3-8", jnp.float32, False, "xla"),
    ("v3-8", jnp.bfloat16, True, "xla"),  # Mosaic: no bfloat16 matmuls on v2/v3
    ("v5e-8", jnp.bfloat16, True, "pallas"), ("v5e-8", jnp.bfloat16, False, "xla")])
def test_dot_product_on_a_tpu_mesh_picks_pallas_for_inference(tpu, dtype, inference, want):
  """Resolved for the mesh the step is traced on (vit_jax.plan traces TPU steps here)."""
  pytest.importorskip("libtpu", reason="compile-only TPU devices need libtpu (the test extra)")
  mesh = sharding.make_mesh({"data": -1}, devices=compiler_readings.tpu_target(tpu).devices)
  seen = []
  pick = lambda x: seen.append(attention.attention_backend("dot_product", dtype, inference))
  jax.eval_shape(sharding.on_mesh(mesh, lambda x: pick(x) or x), 1.0)
  assert seen == [want]
  assert attention.attention_backend("dot_product", dtype, inference) in ("xla", "cudnn")
