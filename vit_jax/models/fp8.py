"""FP8 matmuls for the transformer's dense layers (config.model.fp8): Hopper's FP8 tensor
cores run them at twice the bfloat16 rate.

Per-tensor current scaling, no state: each operand is scaled by its own amax so that it
fills the format's range, cast (inputs and kernels to e4m3, gradients to e5m2, the usual
recipe: e4m3 keeps precision, e5m2 the range that gradients need), multiplied with an FP8
dot whose output is in the compute dtype, and rescaled. The parameters stay float32
master weights under their released names, so checkpoints and params.npz are unchanged and
a run can switch FP8 on or off at any step. Delayed scaling (flax's Fp8DotGeneralOp) would
save the amax passes but carries an amax history per layer in an extra variable collection
through the train state, sharding rules and checkpoints; current scaling is a pure
function, so scan_layers, remat and every mesh take it as they take lax.dot_general.

On GPUs XLA lowers the FP8 dot to cuBLASLt's FP8 GEMM; on CPUs and TPUs without FP8 units
it computes the same rounded values in a wider type, which is what the CPU tests check.
"""

import math
from typing import Sequence, Tuple

import jax
import jax.numpy as jnp

E4M3 = jnp.float8_e4m3fn  # activations and kernels: 3 mantissa bits, max 448
E5M2 = jnp.float8_e5m2  # gradients: 2 mantissa bits, max 57344


def _scale(x, fp8_dtype):
  """The float32 factor that maps x's largest magnitude onto the format's largest finite
  value (1 for an all-zero tensor). Not differentiated: a scale is bookkeeping."""
  amax = jnp.max(jnp.abs(x)).astype(jnp.float32)
  largest = jnp.float32(jnp.finfo(fp8_dtype).max)
  return jax.lax.stop_gradient(jnp.where(amax > 0, amax / largest, 1.0))


def quantize(x, fp8_dtype) -> Tuple[jax.Array, jax.Array]:
  """(x / scale in fp8_dtype, scale): x is approximately the first times the second."""
  scale = _scale(x, fp8_dtype)
  return (x.astype(jnp.float32) / scale).astype(fp8_dtype), scale


def _matmul(a, b):
  """a [M, K] @ b [K, N] on FP8 operands, accumulated and returned in float32."""
  return jax.lax.dot_general(a, b, (((1,), (0,)), ((), ())),
                             preferred_element_type=jnp.float32)


@jax.custom_vjp
def fp8_matmul(x, kernel):
  """x [M, K] @ kernel [K, N] with both operands in e4m3 (gradients in e5m2), returned in
  their common dtype."""
  return _forward(x, kernel)[0]


def _forward(x, kernel):
  qx, sx = quantize(x, E4M3)
  qk, sk = quantize(kernel, E4M3)
  y = _matmul(qx, qk) * (sx * sk)
  # Zero-size stand-ins carry the operands' dtypes to the backward pass (residuals must
  # be arrays).
  return y.astype(jnp.result_type(x, kernel)), (qx, sx, qk, sk, x[:0, :0], kernel[:0, :0])


def _backward(residuals, grad):
  """dx = g k^T and dk = x^T g, each an FP8 dot of the e5m2 gradient with an e4m3 operand
  saved by the forward pass (already quantized: no second cast)."""
  qx, sx, qk, sk, x_like, kernel_like = residuals
  qg, sg = quantize(grad, E5M2)
  dx = _matmul(qg, qk.T) * (sg * sk)
  dk = _matmul(qx.T, qg) * (sx * sg)
  return dx.astype(x_like.dtype), dk.astype(kernel_like.dtype)


fp8_matmul.defvjp(_forward, _backward)


def _contracts_trailing_into_leading(lhs_ndim: int, contracting: Sequence[Sequence[int]],
                                     batch: Sequence[Sequence[int]]) -> bool:
  (lhs_axes, rhs_axes), (lhs_batch, rhs_batch) = contracting, batch
  n = len(lhs_axes)
  return (not lhs_batch and not rhs_batch
          and tuple(lhs_axes) == tuple(range(lhs_ndim - n, lhs_ndim))
          and tuple(rhs_axes) == tuple(range(n)))


def dot_general(lhs, rhs, dimension_numbers, precision=None, preferred_element_type=None):
  """lax.dot_general for flax's Dense / DenseGeneral (the `dot_general` attribute): the
  input's trailing axes contracted with the kernel's leading ones, computed as one FP8
  matmul. Any other contraction is not a dense layer's and is refused."""
  del precision  # FP8 has one precision
  contracting, batch = dimension_numbers
  if not _contracts_trailing_into_leading(lhs.ndim, contracting, batch):
    raise ValueError(f"fp8 dot_general takes a dense layer's contraction (the input's "
                     f"trailing axes with the kernel's leading ones), not {dimension_numbers}")
  n = len(contracting[0])
  outer, inner = lhs.shape[:lhs.ndim - n], lhs.shape[lhs.ndim - n:]
  features = rhs.shape[n:]
  y = fp8_matmul(lhs.reshape(math.prod(outer), math.prod(inner)),
                 rhs.reshape(math.prod(inner), math.prod(features)))
  y = y.reshape(*outer, *features)
  return y if preferred_element_type is None else y.astype(preferred_element_type)


def dot_general_for(fp8: bool):
  """What the transformer's dense layers multiply with: FP8 or XLA's own dot."""
  return dot_general if fp8 else jax.lax.dot_general
