"""Inputs and the softmax definition that the attention kernels' tests check against."""

import functools

import jax
import jax.numpy as jnp
import numpy as np


def attention_inputs(tokens, dtype=jnp.float32):
  return [jax.random.normal(jax.random.PRNGKey(i), (2, tokens, 3, 8), dtype) for i in range(3)]


def softmax_attention(query, key, value):
  weights = jax.nn.softmax(jnp.einsum("bqhd,bkhd->bhqk", query, key) / np.sqrt(query.shape[-1]),
                           axis=-1)
  return jnp.einsum("bhqk,bkhd->bqhd", weights, value)


@functools.partial(jax.jit, static_argnums=(0, 1))
def values_and_grads(attention_fn, reference_fn, inputs):
  """Both attentions' outputs and the gradients of sum(sin(output)) for q, k and v, in
  one compiled program (op by op, each of the many small ops would compile on its own)."""
  def value_and_grads(f):
    loss = lambda *qkv: jnp.sum(jnp.sin(f(*qkv)))
    return f(*inputs), jax.grad(loss, argnums=(0, 1, 2))(*inputs)
  return value_and_grads(attention_fn), value_and_grads(reference_fn)
