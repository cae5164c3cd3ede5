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

import jax
import jax.numpy as jnp
import numpy as np


@functools.lru_cache(maxsize=None)
def resize_matrix(old: int, new: int) -> np.ndarray:
  """(new*new, old*old) float64 B with vec(resize(x)) = B vec(x), for (old, old) inputs."""
  basis = np.eye(old * old, dtype=np.float32).reshape(old * old, old, old)
  resized = jax.vmap(lambda x: jax.image.resize(x, (new, new), method="bilinear"))(basis)
  return np.asarray(resized, np.float64).reshape(old * old, new * new).T


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
