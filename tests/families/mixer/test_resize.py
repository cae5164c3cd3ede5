"""The token-mixing MLPs for a larger patch grid (vit_jax.families.mixer.resize): block-diagonal
copies, one per h x w window, so that a resized Mixer on an image of tiles computes the
pre-trained Mixer on each tile; grids with no rule fail in one line."""

import jax
import numpy as np
import pytest
from flax import traverse_util

from conftest import random_params
from vit_jax import create_model
from vit_jax.base import errors
from vit_jax.families.mixer import resize as mixer_resize

TINY = dict(patch_size=4, hidden_dim=16, num_blocks=2, tokens_mlp_dim=8, channels_mlp_dim=32)


def test_resized_mixer_on_tiles_is_the_mean_of_the_tiles_logits():
  module = create_model("Mixer-S_16", num_classes=3, **TINY)
  params = random_params(module, 12)  # a 3x3 grid
  tiles = np.random.default_rng(0).uniform(-1, 1, (6, 12, 12, 3)).astype(np.float32)
  per_tile = np.asarray(jax.jit(module.apply)({"params": params}, tiles))
  flat = traverse_util.flatten_dict(params, sep="/")
  resized = traverse_util.unflatten_dict(
      mixer_resize.resize_token_mixing(flat, (3, 3), (6, 9)), sep="/")  # 2 x 3 windows
  big = module.clone(tokens_mlp_dim=8 * 6)
  image = tiles.reshape(2, 3, 12, 12, 3).transpose(0, 2, 1, 3, 4).reshape(1, 24, 36, 3)
  logits = np.asarray(jax.jit(big.apply)({"params": resized}, image))
  np.testing.assert_allclose(logits[0], per_tile.mean(0), rtol=1e-5, atol=1e-5)


def test_the_same_grid_keeps_the_weights():
  rng = np.random.default_rng(0)
  mlp = {"Dense_0/kernel": rng.normal(size=(6, 4)), "Dense_0/bias": rng.normal(size=4),
         "Dense_1/kernel": rng.normal(size=(4, 6)), "Dense_1/bias": rng.normal(size=6)}
  same = mixer_resize.resize_mlp(mlp, (2, 3), (2, 3))
  assert all(np.array_equal(same[k], mlp[k]) for k in mlp)


@pytest.mark.parametrize("old, new", [((14, 14), (24, 24)), ((14, 14), (7, 7)),
                                      ((14, 14), (28, 21))])
def test_no_rule_is_one_line(old, new):
  with pytest.raises(errors.InvalidInput, match=r"no rule for .*whole multiples of it \("
                     f"{old[0]}x{old[1]}, {2 * old[0]}x{2 * old[1]}"):
    mixer_resize.resize_rule(old, new)
