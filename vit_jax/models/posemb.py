"""Position embeddings: resizing a learned table for fine-tuning at another resolution
(facts section 4), and big_vision's fixed 2-D sin-cos table.

The patch rows are laid out on their (h, w) grid and resampled with align-corners
bilinear interpolation (output index o samples input o*(old-1)/(new-1), as
scipy.ndimage.zoom(order=1) does); the class-token row is kept as is.
"""

from typing import Tuple

import numpy as np

from vit_jax import errors


def interpolation_matrix(old: int, new: int) -> np.ndarray:
  """(new, old) float64 matrix of align-corners linear interpolation weights."""
  coords = np.zeros(new) if new == 1 else np.arange(new) * (old - 1) / (new - 1)
  lower = np.clip(np.floor(coords).astype(int), 0, old - 1)
  upper = np.minimum(lower + 1, old - 1)
  frac = coords - lower
  matrix = np.zeros((new, old))
  np.add.at(matrix, (np.arange(new), lower), 1 - frac)
  np.add.at(matrix, (np.arange(new), upper), frac)
  return matrix


def resize_grid(grid: np.ndarray, new_hw: Tuple[int, int]) -> np.ndarray:
  """Resamples a (h, w, D) grid to (new_h, new_w, D) in float64, returned in grid's dtype."""
  rows = interpolation_matrix(grid.shape[0], new_hw[0])
  cols = interpolation_matrix(grid.shape[1], new_hw[1])
  resized = np.einsum("Hh,hwd,Ww->HWd", rows, grid.astype(np.float64), cols)
  return resized.astype(grid.dtype)


def square_grid_side(num_tokens: int) -> int:
  side = int(round(np.sqrt(num_tokens)))
  if side * side != num_tokens:
    raise errors.InvalidInput(
        f"position embedding has {num_tokens} patch tokens, which is not a "
        "square grid; pass the original image size explicitly")
  return side


def resize_posemb(posemb: np.ndarray, new_hw: Tuple[int, int], has_cls: bool) -> np.ndarray:
  """Resizes a (1, [1 +] h*w, D) embedding from its square grid to new_hw = (h', w')."""
  extra, patches = (posemb[:, :1], posemb[0, 1:]) if has_cls else (posemb[:, :0], posemb[0])
  side = square_grid_side(patches.shape[0])
  grid = resize_grid(patches.reshape(side, side, -1), new_hw)
  return np.concatenate([extra, grid.reshape(1, new_hw[0] * new_hw[1], -1)], axis=1)


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
