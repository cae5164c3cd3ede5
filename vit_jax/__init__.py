"""vit_jax: the Vision Transformer (Dosovitskiy et al., ICLR 2021) in JAX/Flax.

Public API:
  create_model(name, *, num_classes, **overrides) -> flax module
  load_npz(path, *, image_size=None, num_classes=None, model_name=None) -> (module, params)
  save_npz(params, path)
"""

from vit_jax.models.zoo import create_model
from vit_jax.npz import CheckpointError, load_npz, save_npz

__all__ = ["CheckpointError", "create_model", "load_npz", "save_npz"]
