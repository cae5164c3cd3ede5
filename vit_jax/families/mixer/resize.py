"""A Mixer's token-mixing MLPs for another patch grid (fine-tuning at a higher resolution).

The token-mixing MLP's input width is the patch count S, so a Mixer pre-trained on an
h x w patch grid has no weights for a (Kh*h) x (Kw*w) grid. Following the Mixer paper's
fine-tuning appendix, the new MLP gets Kh*Kw times the hidden width and block-diagonal
copies of the pre-trained weights: the new grid is cut into Kh x Kw groups of h x w
patches, and each group is mixed by its own copy of the pre-trained MLP, in the row-major
patch order the copy was trained on.

Our grouping: each group is a contiguous h x w window of the new grid (the image cut into
Kh x Kw tiles, each at the pre-training grid). So a resized Mixer run on an image made of
Kh x Kw tiles computes, token for token, the pre-trained Mixer on each tile (every other
layer acts per patch), and its logits are the mean of the tiles' logits (tests check that).

Grids that are not whole multiples of the pre-training grid, or smaller, have no such rule:
`resize_rule` says so in one line.
"""

from typing import Dict, Tuple

import numpy as np

from vit_jax.base import errors

Grid = Tuple[int, int]
TOKEN_MIXING = "token_mixing"


def resize_rule(old: Grid, new: Grid) -> Tuple[int, int]:
  """(Kh, Kw), the whole factors from the old to the new grid, or one line saying why no
  rule applies."""
  factors = (new[0] // old[0], new[1] // old[1])
  if new[0] % old[0] or new[1] % old[1] or min(factors) < 1:
    fits = ", ".join(f"{k * old[0]}x{k * old[1]}" for k in (1, 2, 3))
    raise errors.InvalidInput(
        f"a Mixer's token-mixing MLP was trained on a {old[0]}x{old[1]} patch grid and has "
        f"no rule for {new[0]}x{new[1]}: its weights are copied block-diagonally to grids "
        f"that are whole multiples of it ({fits}, ...): pick an image size that gives one")
  return factors


def group_index(old: Grid, new: Grid) -> Tuple[np.ndarray, np.ndarray]:
  """(group, position) of each token of the new grid, row-major: its h x w window and its
  row-major index inside that window."""
  rows, cols = np.divmod(np.arange(new[0] * new[1]), new[1])
  groups_per_row = new[1] // old[1]
  group = (rows // old[0]) * groups_per_row + cols // old[1]
  position = (rows % old[0]) * old[1] + cols % old[1]
  return group, position


def resize_mlp(mlp: Dict[str, np.ndarray], old: Grid, new: Grid) -> Dict[str, np.ndarray]:
  """One token-mixing MLP's flat arrays (`Dense_0/kernel` [S, D], `Dense_0/bias` [D],
  `Dense_1/kernel` [D, S], `Dense_1/bias` [S]) for the new grid: [S', G*D] block-diagonal."""
  kh, kw = resize_rule(old, new)
  groups = kh * kw
  group, position = group_index(old, new)
  kernel_0, bias_0 = mlp["Dense_0/kernel"], mlp["Dense_0/bias"]
  kernel_1, bias_1 = mlp["Dense_1/kernel"], mlp["Dense_1/bias"]
  hidden = kernel_0.shape[1]
  new_0 = np.zeros((group.size, groups, hidden), kernel_0.dtype)
  new_0[np.arange(group.size), group] = kernel_0[position]
  new_1 = np.zeros((groups, hidden, group.size), kernel_1.dtype)
  new_1[group, :, np.arange(group.size)] = kernel_1[:, position].T
  return {"Dense_0/kernel": new_0.reshape(group.size, groups * hidden),
          "Dense_0/bias": np.tile(bias_0, groups),
          "Dense_1/kernel": new_1.reshape(groups * hidden, group.size),
          "Dense_1/bias": bias_1[position]}


def resize_token_mixing(flat: Dict[str, np.ndarray], old: Grid, new: Grid
                        ) -> Dict[str, np.ndarray]:
  """Released-layout flat arrays with every block's token-mixing MLP resized (resize_mlp);
  the rest unchanged."""
  resize_rule(old, new)
  out = dict(flat)
  prefixes = sorted({k.split(f"/{TOKEN_MIXING}/")[0] for k in flat if f"/{TOKEN_MIXING}/" in k})
  for prefix in prefixes:
    base = f"{prefix}/{TOKEN_MIXING}/"
    mlp = {k[len(base):]: v for k, v in flat.items() if k.startswith(base)}
    out.update({base + k: v for k, v in resize_mlp(mlp, old, new).items()})
  return out
