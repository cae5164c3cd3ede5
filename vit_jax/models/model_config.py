"""The model a training config builds, whatever its family: config.model_name picks the
family (vit_jax.models.family_registry), config.model.* and config.dtype set its module."""

import jax.numpy as jnp

from vit_jax.base import config_checks, errors
from vit_jax.models import family_registry

# config.model keys that configure training, not the module (vit_jax.training.objectives.flexi).
NOT_MODULE_KEYS = ("flexi_patch_sizes", "flexi_export_patch_size")


def config_overrides(config) -> dict:
  """The module attributes a training config sets: config.model.* (but the representation
  size, which depends on the checkpoint, and the FlexiViT keys of
  vit_jax.training.objectives.flexi) and the compute dtype."""
  overrides = {k: v for k, v in config.model.items()
               if k not in ("representation_size", *NOT_MODULE_KEYS)
               and not (k == "patch_size" and v is None)}
  return {**overrides, "dtype": jnp.dtype(config.dtype)}


def model_from_config(config, num_classes: int):
  """The module a training config builds from scratch: what the main job trains (the
  family of config.model_name decides what its settings mean)."""
  return family_registry.for_model_name(config.model_name).names.from_config(config,
                                                                             num_classes)


def check_config(config):
  """The model a training config builds (with a 1-class head), or one line naming the
  config.dtype or config.model value that cannot build it, before any data is read."""
  config_checks.config_choice(config_checks.DTYPES, "dtype", config.dtype)
  try:
    return model_from_config(config, num_classes=1)
  except (TypeError, errors.InvalidInput) as e:  # an unknown or out-of-range config.model.*
    message = str(e)
    raise errors.InvalidInput(message if message.startswith("config.")
                              else f"config.model: {message}") from None


def patch_size(config) -> int:
  """The patch side in pixels of the model a training config builds: config.model.patch_size
  where set, else its model_name's (what a NaFlex loader cuts images into)."""
  return config.model.get("patch_size") or family_registry.architecture(
      config.model_name).patch_size
