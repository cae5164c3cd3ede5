"""Shapes and dtypes of the global batches both loaders feed the train and eval steps,
without reading data or importing TensorFlow: what vit_jax.planning.compiled_plan compiles
the steps for ahead of time. tests/data/test_batch_spec.py holds them to the loaders' real
batches."""

from typing import Dict, Tuple

import numpy as np

Spec = Dict[str, Tuple[Tuple[int, ...], np.dtype]]


def train_batch(config, num_classes: int, batch_size: int) -> Spec:
  """{'image': float32 [B, crop, crop, 3], 'label': int32 [B]}; with MixUp the labels are
  mixed one-hot vectors, float32 [B, num_classes]."""
  crop = config.pp.crop
  label = (((batch_size, num_classes), np.dtype(np.float32)) if config.pp.mixup_alpha
           else ((batch_size,), np.dtype(np.int32)))
  return {"image": ((batch_size, crop, crop, 3), np.dtype(np.float32)), "label": label}


def eval_batch(config, batch_size: int) -> Spec:
  """{'image': float32 [B, crop, crop, 3], 'label': int32 [B], 'mask': float32 [B]}
  (mask 0 on the padding rows of the last batch)."""
  crop = config.pp.crop
  return {"image": ((batch_size, crop, crop, 3), np.dtype(np.float32)),
          "label": ((batch_size,), np.dtype(np.int32)),
          "mask": ((batch_size,), np.dtype(np.float32))}
