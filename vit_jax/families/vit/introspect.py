"""What a trained ViT has learned, as arrays (the paper's Figs. 6, 7 and 14).

Pure numpy/JAX computations behind `vit_jax.visualize`: attention maps collected
from the blocks' sown intermediates, attention rollout (Abnar & Zuidema, 2020),
mean attention distance per head, position-embedding similarity and the principal
components of the RGB filters. Plotting lives in visualize.py.
"""

from typing import Any, Tuple

import jax
import jax.numpy as jnp
import numpy as np

from vit_jax.base import errors
from vit_jax.families.vit import hybrid_stem
from vit_jax.families.vit import model as vit
from vit_jax.models import encoder_blocks

Grid = Tuple[int, int]  # tokens per (height, width)
ATTENTION_MODULE = "MultiHeadDotProductAttention_1"


def has_class_token(module: vit.VisionTransformer) -> bool:
  return module.classifier == "token"


def attention_weights(module: vit.VisionTransformer, params: Any,
                      images: np.ndarray) -> np.ndarray:
  """float32 [layers, B, heads, T, T] softmax attention of every block (rows: queries).

  Asking for the `intermediates` collection makes the blocks sow their weights (and
  use the explicit softmax even with attention_impl='dot_product').
  """
  @jax.jit
  def collect(params, images):
    _, state = module.apply({"params": params}, images, train=False,
                            mutable=["intermediates"])
    blocks = state["intermediates"]["Transformer"]
    if module.scan_layers:  # already stacked by depth
      return blocks[encoder_blocks.SCANNED_BLOCKS][ATTENTION_MODULE]["attention_weights"][0]
    return jnp.stack([blocks[f"encoderblock_{i}"][ATTENTION_MODULE]["attention_weights"][0]
                      for i in range(module.num_layers)])
  return np.asarray(collect(params, images), np.float32)


def attention_rollout(weights: np.ndarray) -> np.ndarray:
  """[B, T, T] attention flow from the input tokens to the last layer's outputs.

  Heads are averaged and the identity added for the residual path; rows are
  renormalised so that every layer (and so the product) stays row-stochastic.
  """
  num_tokens = weights.shape[-1]
  layers = weights.astype(np.float64).mean(axis=2) + np.eye(num_tokens)
  layers /= layers.sum(axis=-1, keepdims=True)
  rollout = layers[0]
  for layer in layers[1:]:
    rollout = layer @ rollout
  return rollout.astype(np.float32)


def unit_range(x: np.ndarray, axes: Tuple[int, ...]) -> np.ndarray:
  """x scaled to [0, 1] over `axes` (a constant slice maps to 0), for display."""
  low = x.min(axis=axes, keepdims=True)
  span = x.max(axis=axes, keepdims=True) - low
  return (x - low) / np.where(span > 0, span, 1)


def rollout_maps(rollout: np.ndarray, grid: Grid, has_cls: bool) -> np.ndarray:
  """[B, gh, gw] in [0, 1]: what the class token (gap models: all tokens) attends to."""
  if has_cls:
    rows = rollout[:, 0, 1:]
  else:
    rows = rollout.mean(axis=1)
  _check_tokens(rows.shape[-1], grid)
  return unit_range(rows.reshape(-1, *grid), axes=(1, 2))


def _check_tokens(num_patches: int, grid: Grid) -> None:
  if num_patches != grid[0] * grid[1]:
    raise errors.InvalidInput(
        f"{num_patches} patch tokens do not form a {grid[0]}x{grid[1]} grid: "
        "pass the token grid of the image size the model ran at")


def patch_distances(grid: Grid, stride: int) -> np.ndarray:
  """[N, N] pixel distances between the centres of the N = gh * gw patches."""
  rows, cols = np.meshgrid(np.arange(grid[0]), np.arange(grid[1]), indexing="ij")
  centres = stride * np.stack([rows.ravel(), cols.ravel()], axis=-1).astype(np.float64)
  return np.linalg.norm(centres[:, None] - centres[None], axis=-1)


def mean_attention_distance(weights: np.ndarray, grid: Grid, stride: int,
                            has_cls: bool) -> np.ndarray:
  """[layers, heads] attention-weighted pixel distance from query to key patches.

  The paper's "attention distance" (Fig. 7 right): the class token is left out as
  query and key, so each query's weights are renormalised over the patch keys;
  averaged over query patches and images.
  """
  patches = weights[..., 1:, 1:] if has_cls else weights
  _check_tokens(patches.shape[-1], grid)
  patches = patches.astype(np.float64)
  patches /= patches.sum(axis=-1, keepdims=True)
  per_query = (patches * patch_distances(grid, stride)).sum(axis=-1)  # [L, B, heads, N]
  return per_query.mean(axis=(1, 3))


def position_similarity(pos_embedding: np.ndarray, grid: Grid, has_cls: bool) -> np.ndarray:
  """[gh, gw, gh, gw] cosine similarity between the patches' position embeddings."""
  patches = np.asarray(pos_embedding, np.float64).reshape(-1, pos_embedding.shape[-1])
  patches = patches[1:] if has_cls else patches
  _check_tokens(patches.shape[0], grid)
  patches /= np.linalg.norm(patches, axis=-1, keepdims=True)
  return np.clip(patches @ patches.T, -1, 1).reshape(*grid, *grid)


def rgb_filters(module: vit.VisionTransformer, params: Any) -> Tuple[np.ndarray, str]:
  """(kernel (k, k, 3, filters), what it is): the first layer that sees RGB pixels.

  A hybrid's patch embedding reads ResNet features, so its root conv stands in,
  standardised as the model applies it.
  """
  if module.resnet_stages is not None:
    kernel = hybrid_stem.standardize_weight(jnp.asarray(params["conv_root"]["kernel"]))
    return np.asarray(kernel), ("ResNet root conv filters (a hybrid's patch embedding "
                                "sees features, not RGB)")
  return np.asarray(params["embedding"]["kernel"]), "Patch embedding filters"


def filter_pca(kernel: np.ndarray, num_components: int) -> Tuple[np.ndarray, np.ndarray]:
  """Top principal components of a conv's filters: ([k, kh, kw, in], explained variance ratio).

  Each of the kernel's output filters is one sample of kh * kw * in pixels.
  """
  samples = np.asarray(kernel, np.float64).reshape(-1, kernel.shape[-1]).T
  samples -= samples.mean(axis=0)
  _, singular, components = np.linalg.svd(samples, full_matrices=False)
  k = min(num_components, len(singular))
  variance = singular**2
  return components[:k].reshape(k, *kernel.shape[:-1]), variance[:k] / variance.sum()
