"""Everything about a config that can be refused without reading data or files, each key by
its owner, before any lock, download or write: the main job's first check, and what
vit_jax.plan checks a config for a slice with (so plan needs no part of the loop)."""

import ml_collections

from vit_jax.base import config_checks
from vit_jax.data import loaders
from vit_jax.models import attention
from vit_jax.models import model_config
from vit_jax.models import family_registry
from vit_jax.training import evaluators as evaluators_lib
from vit_jax.training import lora_adapters, objectives, optim, param_groups, sharding, update_step


def check_static(config: ml_collections.ConfigDict, mesh,
                 objective: objectives.Objective) -> None:
  """Everything about the config that can be refused without reading data or files, each
  key by its owner, before any lock, download or write (vit_jax.plan checks a config for a
  slice with it too)."""
  config_checks.normalize(config)
  config_checks.check(config)
  optim.check(config)
  update_step.check(config)
  param_groups.check(config)
  lora_adapters.check(config)
  objective.check(config)
  evaluators_lib.check_all(config, objective)
  sharding.check_config_batches(config, mesh)
  module = model_config.check_config(config)
  sharding.check_model_tensor_parallel(module, mesh)
  attention.check_runs_on(config.model.attention_impl, mesh.devices.flat[0].platform)
  loaders.check(config, family_registry.stride(module))
