"""Position-embedding resize (vit_facts.md section 4)."""

import numpy as np
import pytest
import scipy.ndimage

from vit_jax.models import posemb


@pytest.mark.parametrize("old,new", [(14, 24), (24, 14), (7, 7), (3, 10), (1, 4)])
def test_resize_equals_scipy_zoom_order_1(old, new):
  grid = np.random.default_rng(0).normal(size=(old, old, 5)).astype(np.float32)
  expected = scipy.ndimage.zoom(grid.astype(np.float64), (new / old, new / old, 1), order=1)
  np.testing.assert_allclose(posemb.resize_grid(grid, (new, new)), expected, rtol=1e-6,
                             atol=1e-6)


def test_corners_are_kept_and_class_row_untouched():
  table = np.random.default_rng(1).normal(size=(1, 1 + 14 * 14, 3)).astype(np.float32)
  resized = posemb.resize_posemb(table, (24, 24), has_cls=True)
  assert resized.shape == (1, 577, 3)
  np.testing.assert_array_equal(resized[:, 0], table[:, 0])
  old, new = table[0, 1:].reshape(14, 14, 3), resized[0, 1:].reshape(24, 24, 3)
  for (i, j), (k, l) in [((0, 0), (0, 0)), ((13, 13), (23, 23)), ((0, 13), (0, 23))]:
    np.testing.assert_allclose(new[k, l], old[i, j], rtol=1e-6)


def test_without_class_token_and_to_a_rectangle():
  table = np.random.default_rng(2).normal(size=(1, 16, 2))
  assert posemb.resize_posemb(table, (6, 8), has_cls=False).shape == (1, 48, 2)


def test_non_square_table_is_refused():
  with pytest.raises(ValueError, match="not a square grid"):
    posemb.resize_posemb(np.zeros((1, 1 + 15, 2)), (4, 4), has_cls=True)
