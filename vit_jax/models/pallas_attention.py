"""Self-attention through the Pallas flash-attention kernel for TPUs.

XLA has no fused attention on TPU: it materialises every [heads, tokens, tokens] score
tensor, which at 512-518 px (1,025-1,370 tokens) is most of a training step's memory. The
Pallas kernel (jax.experimental.pallas.ops.tpu.flash_attention) works in blocks of 128
tokens and never holds the whole score matrix. ViT's token counts (197, 577, 1,370) are
not multiples of 128, so tokens are padded and the padding is kept out of the softmax with
segment ids (real tokens attend only to real tokens): the same function as
softmax(q k^T / sqrt(d)) v, checked on the CPU in Pallas's TPU interpret mode.

A Pallas kernel is one opaque call that XLA's partitioner cannot split, so under a mesh it
runs per shard (shard_map): the batch over every mesh axis but 'tensor', the heads over
'tensor'. The mesh is the abstract mesh the step is traced under
(vit_jax.training.sharding.on_mesh).
"""

import jax
import jax.numpy as jnp
from jax.experimental.pallas.ops.tpu import flash_attention as pallas_flash
from jax.sharding import PartitionSpec

BLOCK = 128  # the kernel's default block of queries and keys
HEAD_AXIS = "tensor"  # the mesh axis that splits heads (vit_jax.training.sharding.AXES)


def padded_tokens(tokens: int) -> int:
  return -(-tokens // BLOCK) * BLOCK


def _kernel(query, key, value):
  """[batch, tokens, heads, head_dim] in and out, on one device's share."""
  batch, tokens, _, head_dim = query.shape
  padded = padded_tokens(tokens)
  to_kernel = lambda t: jnp.pad(t, ((0, 0), (0, padded - tokens), (0, 0), (0, 0))
                                ).transpose(0, 2, 1, 3)
  segment = jnp.broadcast_to((jnp.arange(padded) < tokens).astype(jnp.int32),
                             (batch, padded))  # 1: a real token, 0: padding
  mixed = pallas_flash.flash_attention(
      to_kernel(query), to_kernel(key), to_kernel(value),
      segment_ids=pallas_flash.SegmentIds(segment, segment), sm_scale=head_dim**-0.5)
  return mixed.transpose(0, 2, 1, 3)[:, :tokens]


def attention(query, key, value):
  """softmax(q k^T / sqrt(d)) v over [batch, tokens, heads, head_dim]; per shard of the
  traced mesh where there is one (a batch the mesh does not divide, such as the single
  image that initialises a model, runs whole)."""
  mesh = jax.sharding.get_abstract_mesh()
  if mesh.empty or mesh.size == 1:
    return _kernel(query, key, value)
  batch_axes = tuple(name for name in mesh.axis_names if name != HEAD_AXIS)
  batch_shards = 1
  for name in batch_axes:
    batch_shards *= mesh.shape[name]
  if query.shape[0] % batch_shards:
    return _kernel(query, key, value)
  heads = HEAD_AXIS if HEAD_AXIS in mesh.axis_names else None
  spec = PartitionSpec(batch_axes, None, heads, None)
  return jax.shard_map(_kernel, mesh=mesh, in_specs=(spec,) * 3, out_specs=spec,
                       check_vma=False)(query, key, value)
