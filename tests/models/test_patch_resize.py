"""FlexiViT's PI-resize of the patch embedding (vit_jax.models.patch_resize)."""

import functools

import jax
import numpy as np
import pytest

from vit_jax.models import patch_resize


def _embed(patches, kernel):
  """[N, p, p, C] patches -> [N, D] tokens, as the `embedding` conv computes one patch."""
  return np.einsum("nhwc,hwcd->nd", np.asarray(patches, np.float64),
                   np.asarray(kernel, np.float64))


@functools.partial(jax.jit, static_argnums=1)  # one program, not one per op
def _bilinear(patches, side):
  return jax.image.resize(patches, (patches.shape[0], side, side, patches.shape[-1]),
                          method="bilinear")


def _random(old, channels=3, features=5, count=7, seed=0):
  rng = np.random.default_rng(seed)
  return (rng.normal(size=(old, old, channels, features)).astype(np.float32),
          rng.normal(size=(count, old, old, channels)).astype(np.float32))


@pytest.mark.parametrize("old,new", [(4, 8), (8, 12), (3, 7), (5, 5)])
def test_growing_embeds_the_resized_patch_exactly_as_the_original(old, new):
  kernel, patches = _random(old)
  resized = patch_resize.pi_resize_kernel(kernel, new)
  assert resized.shape == (new, new, 3, 5)
  np.testing.assert_allclose(_embed(_bilinear(patches, new), resized), _embed(patches, kernel),
                             rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("old,new", [(8, 4), (12, 8), (7, 3)])
def test_shrinking_is_the_least_squares_solution(old, new):
  """No kernel embeds resized patches closer to the original embeddings on average over
  white-noise patches: E||x.w - Bx.w'||^2 = ||w - B^T w'||^2 is minimal, i.e. its gradient
  B (B^T w' - w) vanishes, and w' is numpy's least-squares solution."""
  kernel, _ = _random(old, seed=1)
  resized = np.asarray(patch_resize.pi_resize_kernel(kernel, new), np.float64)
  b = patch_resize.resize_matrix(old, new)
  w, w_new = kernel.reshape(old * old, -1), resized.reshape(new * new, -1)
  gradient = b @ (b.T @ w_new - w)
  assert np.abs(gradient).max() < 1e-4 * np.abs(w).max()
  expected = np.linalg.lstsq(b.T, w.astype(np.float64), rcond=None)[0]
  np.testing.assert_allclose(w_new, expected, rtol=1e-4, atol=1e-4)
  # and it is better than the naive bilinear resize of the kernel itself
  naive = np.asarray(_bilinear(kernel.transpose(2, 0, 1, 3).reshape(1, old, old, -1), new))
  naive = naive.reshape(new * new, -1) * (old / new)**2
  assert np.linalg.norm(b.T @ w_new - w) < np.linalg.norm(b.T @ naive - w)


def test_resize_matrix_is_jax_image_resize():
  _, patches = _random(6, channels=1, count=3, seed=2)
  b = patch_resize.resize_matrix(6, 9)
  expected = np.asarray(_bilinear(patches, 9))[..., 0].reshape(3, 81)
  np.testing.assert_allclose(patches[..., 0].reshape(3, 36) @ b.T, expected, atol=1e-6)


def test_non_square_kernel_is_refused():
  with pytest.raises(ValueError, match="not square"):
    patch_resize.pi_resize_kernel(np.zeros((4, 2, 3, 5), np.float32), 8)
