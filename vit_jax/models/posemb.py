"""Position embeddings: resizing a learned table for fine-tuning at another resolution
(facts section 4), and big_vision's fixed 2-D sin-cos table.

The patch rows are laid out on their (h, w) grid and resampled with align-corners
bilinear interpolation (output index o samples input o*(old-1)/(new-1), as
scipy.ndimage.zoom(order=1) does); the class-token row is kept as is. The same function
resizes at load time and inside the model at run time (any input size, non-square too).
NaFlex (SigLIP 2) resizes a square table to each image's own grid inside the step, with an
antialiased bilinear filter computed as weights (resize_posemb_per_image).
"""

from typing import Optional, Tuple

import jax
import jax.numpy as jnp
import numpy as np

from vit_jax.base import errors


def _taps(old: int, new: int) -> Tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
  """Align-corners linear interpolation from `old` to `new` samples: output o is
  w_lo[o] * in[lo[o]] + w_hi[o] * in[hi[o]], at o*(old-1)/(new-1) (weights float32)."""
  coords = np.zeros(new) if new == 1 else np.arange(new) * (old - 1) / (new - 1)
  lower = np.clip(np.floor(coords).astype(int), 0, old - 1)
  upper = np.minimum(lower + 1, old - 1)
  frac = coords - lower
  return lower, upper, (1 - frac).astype(np.float32), frac.astype(np.float32)


def _resize_axis(x, new: int, axis: int):
  old = x.shape[axis]
  if old == new:
    return x
  lower, upper, w_lower, w_upper = _taps(old, new)
  shape = [1] * x.ndim
  shape[axis] = new
  return (jnp.take(x, lower, axis=axis) * w_lower.reshape(shape)
          + jnp.take(x, upper, axis=axis) * w_upper.reshape(shape))


def resize_grid(grid, new_hw: Tuple[int, int]) -> jax.Array:
  """Resamples a (h, w, D) grid to (new_h, new_w, D) in float32: rows, then columns.

  The one resize of learned position embeddings, jnp so that it runs both when a file is
  loaded (vit_jax.checkpoints.npz) and inside the model for another input size
  (encoder_blocks.AddPositionEmbs): the same float32 operations in the same order, so the two give
  the same bits.
  """
  grid = jnp.asarray(grid, jnp.float32)
  return _resize_axis(_resize_axis(grid, new_hw[0], 0), new_hw[1], 1)


def square_grid_side(num_tokens: int) -> int:
  side = int(round(np.sqrt(num_tokens)))
  if side * side != num_tokens:
    raise errors.InvalidInput(
        f"position embedding has {num_tokens} patch tokens, which is not a "
        "square grid; pass the original image size explicitly")
  return side


def resize_posemb(posemb, new_hw: Tuple[int, int], has_cls: bool,
                  old_hw: Optional[Tuple[int, int]] = None) -> jax.Array:
  """Resizes a (1, [1 +] h*w, D) embedding from its grid (old_hw; default: square) to
  new_hw = (h', w'), in float32; the class-token row is kept as is."""
  posemb = jnp.asarray(posemb, jnp.float32)
  extra, patches = (posemb[:, :1], posemb[0, 1:]) if has_cls else (posemb[:, :0], posemb[0])
  old_hw = old_hw or (square_grid_side(patches.shape[0]),) * 2
  grid = resize_grid(patches.reshape(*old_hw, -1), new_hw)
  return jnp.concatenate([extra, grid.reshape(1, new_hw[0] * new_hw[1], -1)], axis=1)


def sincos_2d(grid: Tuple[int, int], width: int, temperature: float = 10_000.0) -> np.ndarray:
  """big_vision's fixed `posemb='sincos2d'` table, (1, h*w, width) float32 (no parameter).

  Tokens in row-major (h, then w) order; the channels are [sin(x*w_k), cos(x*w_k),
  sin(y*w_k), cos(y*w_k)] with w_k = temperature**(-k / (width/4 - 1)), k < width/4, where
  x is the column and y the row index (the MoCo v3 embedding). Computed in float64.
  """
  if width % 4 or width < 8:
    raise errors.InvalidInput(
        f"sincos2d position embeddings need a hidden size that is a multiple of 4 "
        f"and at least 8, got {width}")
  quarter = width // 4
  omega = 1.0 / temperature**(np.arange(quarter) / (quarter - 1))
  rows, cols = np.mgrid[:grid[0], :grid[1]]
  y = np.outer(rows.reshape(-1), omega)
  x = np.outer(cols.reshape(-1), omega)
  table = np.concatenate([np.sin(x), np.cos(x), np.sin(y), np.cos(y)], axis=1)
  return table[None].astype(np.float32)


def sincos_2d_with_cls(grid: Tuple[int, int], width: int, has_cls: bool) -> np.ndarray:
  """sincos_2d with a zero row first for a class token (big_vision adds the embedding to
  the patches before prepending the token): a table in the learned embedding's layout."""
  table = sincos_2d(grid, width)
  return np.concatenate([np.zeros_like(table[:, :1]), table], axis=1) if has_cls else table


def triangle_weights(out_size, in_size: int, max_out: int):
  """[max_out, in_size] weights of an antialiased linear resize from in_size to out_size
  (a traced scalar) samples, as PyTorch's interpolate(mode='bilinear', antialias=True,
  align_corners=False) and PIL compute them: half-pixel centres, the triangle widened by
  the downscale factor, each row normalised; rows at or past out_size are junk (padding)."""
  scale = in_size / jnp.maximum(out_size, 1).astype(jnp.float32)
  support = jnp.maximum(scale, 1.0)
  centre = (jnp.arange(max_out, dtype=jnp.float32)[:, None] + 0.5) * scale
  offset = jnp.arange(in_size, dtype=jnp.float32)[None, :] + 0.5 - centre
  weights = jnp.maximum(0.0, 1.0 - jnp.abs(offset) / support)
  return weights / jnp.maximum(jnp.sum(weights, axis=1, keepdims=True), 1e-12)


def resize_posemb_per_image(table, shapes, num_patches: int):
  """table (1, g*g, D) -> [B, num_patches, D]: image b's rows*cols first, resized to its
  grid shapes[b] and flattened row-major (the rest: padding, masked out)."""
  grid = int(round(table.shape[1] ** 0.5))
  table = table.reshape(grid, grid, -1).astype(jnp.float32)
  index = jnp.arange(num_patches)

  def one(shape):
    rows, cols = shape[0], shape[1]
    row_w = triangle_weights(rows, grid, num_patches)[index // jnp.maximum(cols, 1)]
    col_w = triangle_weights(cols, grid, num_patches)[index % jnp.maximum(cols, 1)]
    return jnp.einsum("na,nb,abd->nd", row_w, col_w, table)

  return jax.vmap(one)(jnp.asarray(shapes))
