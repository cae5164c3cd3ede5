"""Shapes and dtypes of the global batches both loaders feed the train and eval steps,
without reading data or importing TensorFlow: what vit_jax.planning.compiled_plan compiles
the steps for ahead of time, and what the train state is initialised on.
tests/data/test_batch_spec.py holds them to the loaders' real batches.

With config.pp.max_patches (NaFlex, docs/siglip_classifiers.md) the image is a dict of
patches, their mask and each image's grid. data/ cannot ask the model zoo for the patch
size (models import data), so the callers pass it (vit_jax.families.vit.names.patch_size(config),
or the module's patch_size)."""

from typing import Any, Callable, Dict, Optional, Tuple

import jax
import numpy as np

Array = Tuple[Tuple[int, ...], np.dtype]  # (shape, dtype)
Spec = Dict[str, Any]  # name -> Array, or (the NaFlex image) name -> {name -> Array}


def image(config, batch_size: int, patch_size: Optional[int] = None):
  """The image entry: float32 [B, crop, crop, 3]; with pp.max_patches N, {'patches':
  float32 [B, N, P*P*3] in [-1, 1], 'mask': int32 [B, N] (1: a real patch), 'grid': int32
  [B, 2] (each image's rows and columns of patches)}, P the model's patch size."""
  max_patches = config.pp.get("max_patches")
  if max_patches is None:
    crop = config.pp.crop
    return (batch_size, crop, crop, 3), np.dtype(np.float32)
  if not patch_size:
    raise ValueError("a NaFlex batch (config.pp.max_patches) needs the model's patch size: "
                     "pass patch_size=vit_jax.families.vit.names.patch_size(config)")
  return {"patches": ((batch_size, max_patches, patch_size * patch_size * 3),
                      np.dtype(np.float32)),
          "mask": ((batch_size, max_patches), np.dtype(np.int32)),
          "grid": ((batch_size, 2), np.dtype(np.int32))}


def text(config, batch_size: int) -> Dict[str, Array]:
  """{'text': int32 [B, config.text.length]} (each row's caption, tokenised) for a
  contrastive run, else {}."""
  if config.get("objective") != "contrastive":
    return {}
  return {"text": ((batch_size, config.text.length), np.dtype(np.int32))}


def train_batch(config, num_classes: int, batch_size: int,
                patch_size: Optional[int] = None) -> Spec:
  """{'image': see image(), 'label': int32 [B]} and text(); with MixUp the labels are
  mixed one-hot vectors, float32 [B, num_classes]."""
  label = (((batch_size, num_classes), np.dtype(np.float32)) if config.pp.mixup_alpha
           else ((batch_size,), np.dtype(np.int32)))
  return {"image": image(config, batch_size, patch_size), "label": label,
          **text(config, batch_size)}


def eval_batch(config, batch_size: int, patch_size: Optional[int] = None) -> Spec:
  """{'image': see image(), 'label': int32 [B], 'mask': float32 [B]} (mask 0 on the
  padding rows of the last batch) and text()."""
  return {"image": image(config, batch_size, patch_size),
          "label": ((batch_size,), np.dtype(np.int32)),
          "mask": ((batch_size,), np.dtype(np.float32)), **text(config, batch_size)}


def map_arrays(fn: Callable[[Tuple[int, ...], np.dtype], Any], spec) -> Any:
  """fn(shape, dtype) on every array of a spec (or of one entry), nesting kept."""
  is_array = lambda x: (isinstance(x, tuple) and len(x) == 2
                        and isinstance(x[1], np.dtype))
  return jax.tree.map(lambda leaf: fn(*leaf), spec, is_leaf=is_array)
