"""Multi-head self-attention with the released parameter layout, and its fused kernels
(jax.nn.dot_product_attention with XLA or cuDNN flash attention, including the cuDNN
even-token padding that its backward pass needs; Pallas flash attention on TPUs)."""

import functools
from typing import Any, Optional, Tuple

import flax.linen as nn
import jax
import jax.numpy as jnp

from vit_jax.base import errors
from vit_jax.models import pallas_attention
from vit_jax.models.fp8 import dot_general_for

# softmax: explicit einsum + float32 softmax (the reference's math; exposes the weights).
# xla / cudnn: jax.nn.dot_product_attention with that backend (cudnn = flash attention,
# GPU and bfloat16/float16 only). pallas: the Pallas flash-attention kernel (TPU only;
# vit_jax.models.pallas_attention). dot_product: cudnn where it applies, else xla.
ATTENTION_IMPLS = ("softmax", "dot_product", "xla", "cudnn", "pallas")
FLASH_DTYPES = (jnp.bfloat16, jnp.float16)


# Mosaic has no bfloat16 matmul operands on these chips (E2001): the kernel runs in float32.
PALLAS_FLOAT32_ONLY = ("TPU v2", "TPU v3")


def traced_device() -> Tuple[str, str]:
  """(platform, device kind) a program is being traced for: the traced mesh's
  (vit_jax.training.sharding.on_mesh; vit_jax.plan traces TPU programs on a CPU machine), else this
  process's default."""
  mesh = jax.sharding.get_abstract_mesh()
  if mesh.empty:
    return jax.default_backend(), jax.devices()[0].device_kind
  return mesh.abstract_device.platform, mesh.abstract_device.device_kind


def attention_backend(impl: str, dtype: Any, inference: bool = False) -> str:
  """The kernel behind `impl`, 'dot_product' resolved here: cuDNN's flash attention on GPUs
  (jax.nn.dot_product_attention's own default is XLA even there); on TPUs the Pallas kernel
  for inference, XLA for training. vit_jax.plan on a v3-8 (benchmarks/RESULTS.md): Pallas
  estimated the eval steps of L/16 at 512 px, B/8 and H/14 1.5-2.3x faster in 40-73% less
  memory, while in training its opaque backward cost H/14 30% more memory than XLA's
  rematerialised attention (no longer fitting)."""
  if impl != "dot_product":
    return impl
  platform, kind = traced_device()
  if platform == "gpu" and jnp.dtype(dtype) in FLASH_DTYPES:
    return "cudnn"
  if platform == "tpu" and inference and (jnp.dtype(dtype) == jnp.float32
                                          or kind not in PALLAS_FLOAT32_ONLY):
    return "pallas"
  return "xla"


def check_runs_on(impl: str, platform: str) -> None:
  """The Pallas kernel is compiled by Mosaic, the TPU compiler: elsewhere it has no lowering
  (Pallas's interpret mode, for tests, is not a way to train)."""
  if impl == "pallas" and platform != "tpu":
    raise errors.InvalidInput(
        f"attention_impl='pallas' runs on TPUs only, and this run is on {platform}; use "
        "--config.model.attention_impl=dot_product")


def fused_attention(query, key, value, backend: str, pad_to_even: Optional[bool] = None,
                    pad_for_gradients_only: bool = False):
  """softmax(q k^T / sqrt(d)) v over [batch, tokens, heads, head_dim] via
  jax.nn.dot_product_attention, or the Pallas TPU kernel (backend 'pallas').

  cuDNN's backward pass (jax 0.10-0.11) rejects odd token counts such as ViT's
  1 + 14*14 = 197, so by default (pad_to_even=None) cuDNN's tokens are padded to an even
  count, the padding is masked out by sequence length and the output is cut back: the
  same function. Its forward pass takes odd counts, and padding costs inference ~3% on
  an H100: pad_for_gradients_only=True runs the forward unpadded and keeps the padded
  route for gradients, if any are taken (for inference; a training step would compute
  the attention twice)."""
  if backend == "pallas":
    return pallas_attention.attention(query, key, value)
  if pad_to_even is None:
    pad_to_even = backend == "cudnn"
  if pad_to_even and pad_for_gradients_only and query.shape[1] % 2:
    return _unpadded_forward_padded_gradients(query, key, value, backend)
  return _dot_product_attention(query, key, value, backend, pad_to_even)


def _dot_product_attention(query, key, value, backend: str, pad_to_even: bool):
  tokens = query.shape[1]
  lengths = None
  if pad_to_even and tokens % 2:
    query, key, value = (jnp.pad(t, ((0, 0), (0, 1), (0, 0), (0, 0)))
                         for t in (query, key, value))
    lengths = jnp.full((query.shape[0],), tokens, jnp.int32)
  mixed = jax.nn.dot_product_attention(
      query, key, value, scale=query.shape[-1]**-0.5, query_seq_lengths=lengths,
      key_value_seq_lengths=lengths, implementation=backend)
  return mixed[:, :tokens]


@functools.partial(jax.custom_vjp, nondiff_argnums=(3,))
def _unpadded_forward_padded_gradients(query, key, value, backend):
  return _dot_product_attention(query, key, value, backend, pad_to_even=False)


def _unpadded_forward(query, key, value, backend):
  return _unpadded_forward_padded_gradients(query, key, value, backend), (query, key, value)


def _padded_gradients(backend, inputs, cotangent):
  _, pullback = jax.vjp(
      lambda *qkv: _dot_product_attention(*qkv, backend, pad_to_even=True), *inputs)
  return pullback(cotangent)


_unpadded_forward_padded_gradients.defvjp(_unpadded_forward, _padded_gradients)


class SelfAttention(nn.Module):
  """Multi-head self-attention with the released parameter layout.

  query/key/value kernels are (D, heads, head_dim), out is (heads, head_dim, D);
  the query is scaled by 1/sqrt(head_dim) and the softmax runs in float32.
  The fused implementations (see ATTENTION_IMPLS) fall back to the explicit softmax
  when the attention weights are needed (introspection, attention dropout in training).
  With `inputs_kv` the queries come from `x` and the keys and values from `inputs_kv`
  (the MAP head's probe attending to the tokens), always with the explicit softmax, as
  with a `mask` [B, keys] (True: a real token; vit_jax.families.vit.naflex_model's padding).
  unpadded_inference, fp8: see VisionTransformer.
  """
  num_heads: int
  dropout_rate: float = 0.0
  dtype: Any = jnp.float32
  attention_impl: str = "softmax"
  unpadded_inference: bool = True
  fp8: bool = False

  @nn.compact
  def __call__(self, x, *, deterministic: bool, inputs_kv=None, mask=None):
    hidden = x.shape[-1]
    if hidden % self.num_heads:
      raise errors.InvalidInput(
          f"hidden size {hidden} is not divisible by num_heads={self.num_heads}")
    head_dim = hidden // self.num_heads
    projection = lambda name: nn.DenseGeneral(
        (self.num_heads, head_dim), dtype=self.dtype, name=name,
        dot_general=dot_general_for(self.fp8), kernel_init=nn.initializers.xavier_uniform(),
        bias_init=nn.initializers.zeros)
    if self.attention_impl not in ATTENTION_IMPLS:
      raise errors.InvalidInput(
          f"unknown attention_impl {self.attention_impl!r}; choose one of "
          f"{', '.join(ATTENTION_IMPLS)}")
    kv = x if inputs_kv is None else inputs_kv
    query, key, value = (projection(name)(inputs)
                         for name, inputs in (("query", x), ("key", kv), ("value", kv)))
    needs_weights = self.is_mutable_collection("intermediates") or (
        self.dropout_rate > 0 and not deterministic) or inputs_kv is not None or (
            mask is not None)
    if self.attention_impl != "softmax" and not needs_weights:
      mixed = fused_attention(query, key, value,
                              attention_backend(self.attention_impl, self.dtype,
                                                inference=deterministic),
                              pad_for_gradients_only=deterministic and self.unpadded_inference)
    else:
      query = query / jnp.sqrt(head_dim).astype(self.dtype)
      logits = jnp.einsum("bqhd,bkhd->bhqk", query, key).astype(jnp.float32)
      if mask is not None:  # [B, keys]: padding (NaFlex) is attended by no query
        logits = jnp.where(mask[:, None, None, :], logits, jnp.finfo(jnp.float32).min)
      weights = nn.softmax(logits, axis=-1)
      self.sow("intermediates", "attention_weights", weights)
      weights = nn.Dropout(self.dropout_rate)(weights, deterministic=deterministic)
      mixed = jnp.einsum("bhqk,bkhd->bqhd", weights.astype(self.dtype), value)
    return nn.DenseGeneral(
        hidden, axis=(-2, -1), dtype=self.dtype, name="out",
        dot_general=dot_general_for(self.fp8), kernel_init=nn.initializers.xavier_uniform(),
        bias_init=nn.initializers.zeros)(mixed)
