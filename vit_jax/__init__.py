"""vit_jax: the Vision Transformer (Dosovitskiy et al., ICLR 2021) in JAX/Flax.

Public API:
  create_model(name, *, num_classes, **overrides) -> flax module
  load_npz(path, *, image_size=None, num_classes=None, model_name=None, pre_logits=None,
           allow_nonfinite=False, strict_image_size=False, patch_size=None) -> (module, params)
  save_npz(params, path, *, class_names=None, allow_nonfinite=False)
  read_class_names(path) -> list of the class names saved with an .npz, or None
  load_two_tower(path, *, bert_heads=None) -> (TwoTower, params, TwoTowerInfo): a LiT /
           big_vision SigLIP .npz or a Hugging Face SigLIP / SigLIP 2 folder (docs/two_towers.md)
  save_two_tower(params, path): TwoTower params as an .npz in big_vision's layout
  nnx: the same models as Flax NNX modules (vit_jax.nnx.create_model, load_npz, ...;
       imported on first use)
Errors a user can fix are ValueErrors with one-line messages: CheckpointError (the file)
and ImageSizeError (an image size the model cannot run at).
"""

import importlib
import os

# TensorFlow (tf.data only) must not flood the console: C++ INFO logs and the oneDNN
# banner, printed at import time, so set before anything imports it. oneDNN only speeds
# up TF matmuls/convolutions, which the input pipeline does not run.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")

from vit_jax.base import platforms  # pylint: disable=wrong-import-position

platforms.skip_absent_tpu()  # before anything starts JAX's backends

from vit_jax.checkpoints.npz import (  # pylint: disable=wrong-import-position
    CheckpointError, ImageSizeError, load_npz, read_class_names, save_npz)
from vit_jax.families.two_tower.npz_file import (  # pylint: disable=wrong-import-position
    load_two_tower, save_two_tower)
from vit_jax.models.family_registry import create_model  # pylint: disable=wrong-import-position

__all__ = ["CheckpointError", "ImageSizeError", "create_model", "load_npz", "load_two_tower",
           "read_class_names", "save_npz", "save_two_tower"]


def __getattr__(name):
  """vit_jax.nnx on first use, so that only Flax NNX users import it."""
  if name == "nnx":
    return importlib.import_module("vit_jax.nnx")
  raise AttributeError(f"module 'vit_jax' has no attribute {name!r}")
