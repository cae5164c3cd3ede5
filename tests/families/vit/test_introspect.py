"""vit_jax.families.vit.introspect: attention collection, rollout, attention distance, posemb
and filter PCA."""

import numpy as np
import pytest

from conftest import init_params, tiny_model
from vit_jax.families.vit import introspect
from vit_jax.models import encoder_blocks


def stochastic(rng, *shape):
  """Random row-stochastic matrices: what a softmax over keys gives."""
  x = rng.rand(*shape) + 0.1
  return x / x.sum(axis=-1, keepdims=True)


@pytest.mark.parametrize("overrides,image_size,tokens", [
    (dict(), 16, 17),  # 4x4 patches + class token
    (dict(classifier="gap"), 16, 16),
    (dict(resnet_stages=(), resnet_width=0.5, patch_size=2), 32, 17),  # hybrid: stride 4 * 2
])
def test_attention_weights_shapes_and_rows_sum_to_one(overrides, image_size, tokens):
  module = tiny_model(**overrides)
  params = init_params(module, image_size)
  images = np.random.RandomState(0).uniform(-1, 1, (3, image_size, image_size, 3))
  weights = introspect.attention_weights(module, params, images)
  assert weights.shape == (2, 3, 2, tokens, tokens) and weights.dtype == np.float32
  assert weights.min() >= 0
  np.testing.assert_allclose(weights.sum(axis=-1), 1, atol=1e-5)
  assert not np.allclose(weights[0], weights[1])  # one entry per layer, not one layer twice
  flash = introspect.attention_weights(module.clone(attention_impl="dot_product"), params, images)
  np.testing.assert_allclose(flash, weights, atol=1e-6)
  scanned = introspect.attention_weights(module.clone(scan_layers=True),
                                         encoder_blocks.to_scan_layout(params), images)
  np.testing.assert_allclose(scanned, weights, atol=1e-6)


def test_rollout_of_one_layer_is_the_renormalised_attention_plus_identity():
  attention = stochastic(np.random.RandomState(0), 1, 1, 2, 5, 5)  # layers, B, heads, T, T
  rollout = introspect.attention_rollout(attention)
  np.testing.assert_allclose(rollout[0], (attention[0, 0].mean(axis=0) + np.eye(5)) / 2,
                             rtol=1e-6)


def test_rollout_multiplies_layers_first_to_last_and_stays_stochastic():
  attention = stochastic(np.random.RandomState(1), 3, 2, 4, 6, 6)
  rollout = introspect.attention_rollout(attention)
  assert rollout.shape == (2, 6, 6)
  np.testing.assert_allclose(rollout.sum(axis=-1), 1, rtol=1e-5)
  layers = [(a.mean(axis=1) + np.eye(6)) / 2 for a in attention]  # [B, T, T] each
  expected = layers[2] @ layers[1] @ layers[0]  # the last layer's outputs, from the inputs
  np.testing.assert_allclose(rollout, expected, rtol=1e-5)


def test_rollout_maps_read_the_class_token_row_or_the_mean_over_queries():
  rollout = np.full((1, 5, 5), 0.1)
  rollout[0, 0] = [0.5, 0.0, 0.0, 0.4, 0.1]  # the class token attends to patch (1, 0)
  maps = introspect.rollout_maps(rollout, (2, 2), has_cls=True)
  np.testing.assert_allclose(maps[0], [[0, 0], [1, 0.25]])
  gap = np.zeros((1, 4, 4))
  gap[0, :, 2] = 1
  np.testing.assert_allclose(introspect.rollout_maps(gap, (2, 2), has_cls=False)[0],
                             [[0, 0], [1, 0]])
  with pytest.raises(ValueError, match="4 patch tokens do not form a 3x3 grid"):
    introspect.rollout_maps(rollout, (3, 3), has_cls=True)


def test_attention_distance_of_self_attention_is_zero():
  weights = np.broadcast_to(np.eye(6), (2, 1, 3, 6, 6))  # layers, B, heads, T, T
  distance = introspect.mean_attention_distance(weights, (2, 3), stride=16, has_cls=False)
  assert distance.shape == (2, 3)
  np.testing.assert_allclose(distance, 0)


def test_attention_distance_of_uniform_attention_on_known_grids():
  weights = np.full((1, 2, 1, 4, 4), 0.25)
  distance = introspect.mean_attention_distance(weights, (2, 2), stride=16, has_cls=False)
  # From any patch: itself (0), two neighbours (16) and the diagonal one (16 * sqrt(2)).
  np.testing.assert_allclose(distance, [[16 * (2 + np.sqrt(2)) / 4]])
  weights = np.full((1, 2, 1, 4, 4), 0.2)
  weights[..., 0] = 0.4  # attention to the class token is left out and the rest renormalised
  distance = introspect.mean_attention_distance(weights, (1, 3), stride=10, has_cls=True)
  np.testing.assert_allclose(distance, [[(0 + 10 + 20 + 10 + 0 + 10 + 20 + 10 + 0) / 9]])


def test_attention_distance_per_head_and_layer():
  weights = np.zeros((2, 1, 2, 2, 2))  # 1x2 grid, stride 10
  weights[:, :, 0] = np.eye(2)  # head 1 looks at itself
  weights[:, :, 1] = [[0, 1], [1, 0]]  # head 2 at the other patch
  weights[1, :, 1] = 0.5  # layer 2, head 2: uniform
  distance = introspect.mean_attention_distance(weights, (1, 2), stride=10, has_cls=False)
  np.testing.assert_allclose(distance, [[0, 10], [0, 5]])


def test_position_similarity_is_cosine_over_patches_only():
  rng = np.random.RandomState(0)
  posemb = rng.randn(1, 13, 8)
  similarity = introspect.position_similarity(posemb, (3, 4), has_cls=True)
  assert similarity.shape == (3, 4, 3, 4)
  flat = similarity.reshape(12, 12)
  np.testing.assert_allclose(np.diag(flat), 1, rtol=1e-12)
  assert -1 <= flat.min() and flat.max() <= 1
  np.testing.assert_allclose(flat, flat.T)
  patches = posemb[0, 1:] / np.linalg.norm(posemb[0, 1:], axis=-1, keepdims=True)
  np.testing.assert_allclose(flat[2, 7], patches[2] @ patches[7])
  np.testing.assert_allclose(introspect.position_similarity(posemb[:, 1:], (3, 4), False),
                             similarity)


def test_filter_pca_components_are_orthonormal_and_ordered_by_variance():
  rng = np.random.RandomState(0)
  kernel = rng.randn(4, 4, 3, 64) * np.linspace(0.1, 3, 48).reshape(4, 4, 3, 1)
  components, explained = introspect.filter_pca(kernel, 28)
  assert components.shape == (28, 4, 4, 3)
  flat = components.reshape(28, -1)
  np.testing.assert_allclose(flat @ flat.T, np.eye(28), atol=1e-10)
  assert np.all(np.diff(explained) <= 0) and 0 < explained.sum() <= 1
  samples = kernel.reshape(48, 64).T
  projected = (samples - samples.mean(axis=0)) @ flat.T
  variance = projected.var(axis=0)
  assert variance.argmax() == 0 and np.all(np.diff(variance) <= 1e-9)
  assert introspect.filter_pca(kernel[..., :5], 28)[0].shape == (5, 4, 4, 3)  # rank-limited


def test_rgb_filters_of_a_hybrid_are_the_standardised_root_conv():
  plain = tiny_model()
  kernel, what = introspect.rgb_filters(plain, init_params(plain))
  assert kernel.shape == (4, 4, 3, 32) and what.startswith("Patch embedding")
  hybrid = tiny_model(resnet_stages=(), resnet_width=0.5, patch_size=2)
  kernel, what = introspect.rgb_filters(hybrid, init_params(hybrid, 32))
  assert kernel.shape == (7, 7, 3, 32) and what.startswith("ResNet root conv")
  np.testing.assert_allclose(kernel.mean(axis=(0, 1, 2)), 0, atol=1e-5)
  np.testing.assert_allclose(kernel.std(axis=(0, 1, 2)), 1, atol=1e-3)
