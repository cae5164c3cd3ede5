"""Position-embedding resizing for fine-tuning at another resolution (facts section 4).

The patch rows are laid out on their (h, w) grid and resampled with align-corners
bilinear interpolation (output index o samples input o*(old-1)/(new-1), as
scipy.ndimage.zoom(order=1) does); the class-token row is kept as is.
"""

from typing import Tuple

import numpy as np


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
    raise ValueError(f"position embedding has {num_tokens} patch tokens, which is not a "
                     "square grid; pass the original image size explicitly")
  return side


def resize_posemb(posemb: np.ndarray, new_hw: Tuple[int, int], has_cls: bool) -> np.ndarray:
  """Resizes a (1, [1 +] h*w, D) embedding from its square grid to new_hw = (h', w')."""
  extra, patches = (posemb[:, :1], posemb[0, 1:]) if has_cls else (posemb[:, :0], posemb[0])
  side = square_grid_side(patches.shape[0])
  grid = resize_grid(patches.reshape(side, side, -1), new_hw)
  return np.concatenate([extra, grid.reshape(1, new_hw[0] * new_hw[1], -1)], axis=1)
