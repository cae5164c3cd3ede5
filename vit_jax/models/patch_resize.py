"""FlexiViT's pseudo-inverse resize (PI-resize) of the patch-embedding kernel (Beyer et al.,
"FlexiViT: One Model for All Patch Sizes", CVPR 2023, section 3.4).

A patch x of side p resized to side q is B x, with B the (q*q, p*p) matrix of
jax.image.resize(..., method="bilinear") (half-pixel centres, antialiased when shrinking).
The new kernel w' should embed B x as the old kernel w embeds x: B^T w' = w. PI-resize
takes w' = pinv(B^T) w: an exact solution when the patch grows (q >= p), the least-squares
one (closest B^T w' to w, so the smallest expected error for white-noise patches) when it
shrinks. Each input and output channel is resized alike.
"""

import functools
from typing import Any, Optional

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np


@functools.lru_cache(maxsize=None)
def resize_matrix(old: int, new: int) -> np.ndarray:
  """(new*new, old*old) float64 B with vec(resize(x)) = B vec(x), for (old, old) inputs:
  kron(R, R) of the 1-D resize R (jax.image.resize is separable), row-major vec."""
  # A constant, also when first asked inside a trace or a transfer-guarded train loop.
  with jax.ensure_compile_time_eval(), jax.transfer_guard("allow"):
    rows = jax.image.resize(np.eye(old, dtype=np.float32), (old, new), method="bilinear")
  one_d = np.asarray(rows, np.float64).T  # (new, old): column i resizes the unit vector e_i
  return np.kron(one_d, one_d)


@functools.lru_cache(maxsize=None)
def pi_resize_matrix(old: int, new: int) -> np.ndarray:
  """(new*new, old*old) float32 pinv(B^T): vec(w') = it @ vec(w)."""
  return np.linalg.pinv(resize_matrix(old, new).T).astype(np.float32)


def pi_resize_kernel(kernel, new: int) -> jax.Array:
  """A (p, p, C, D) patch-embedding kernel PI-resized to (new, new, C, D), float32.

  jnp, so that it runs on loaded arrays and inside a model's forward pass alike (FlexiViT
  training resizes its underlying kernel to every step's patch size).
  """
  old, width, channels, features = kernel.shape
  if old != width:
    raise ValueError(f"patch-embedding kernel {kernel.shape} is not square")
  kernel = jnp.asarray(kernel, jnp.float32)
  if old == new:
    return kernel
  matrix = jnp.asarray(pi_resize_matrix(old, new))
  flat = kernel.reshape(old * old, channels * features)
  resized = jnp.matmul(matrix, flat, precision=jax.lax.Precision.HIGHEST)
  return resized.reshape(new, new, channels, features)


class PatchEmbedding(nn.Module):
  """The `embedding` conv (kernel = stride = patch_size, VALID; nn.Conv's names and inits)
  whose kernel is stored at side `kernel_size` (default patch_size) and PI-resized to
  patch_size in the forward pass: FlexiViT's underlying 32x32 kernel serves every size."""
  features: int
  patch_size: int
  kernel_size: Optional[int] = None
  dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, x):
    side = self.kernel_size or self.patch_size
    kernel = self.param("kernel", nn.initializers.lecun_normal(),
                        (side, side, x.shape[-1], self.features), jnp.float32)
    bias = self.param("bias", nn.initializers.zeros, (self.features,), jnp.float32)
    kernel = pi_resize_kernel(kernel, self.patch_size)
    y = jax.lax.conv_general_dilated(
        x.astype(self.dtype), kernel.astype(self.dtype), (self.patch_size,) * 2, "VALID",
        dimension_numbers=("NHWC", "HWIO", "NHWC"))
    return y + bias.astype(self.dtype)
