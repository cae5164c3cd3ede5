"""The training rules of a model's family (vit_jax.models.family_contract.TrainingRules),
as sharding, param_groups and lora_adapters ask them: found from a params tree, or, for a
parameter name alone, every family's (each family's rules name its own layers)."""

import re
from typing import Any, List

from vit_jax.base import errors
from vit_jax.models import family_contract, family_registry


def of_params(params: Any) -> family_contract.TrainingRules:
  """The rules of the family a params tree belongs to, or one line."""
  family = family_registry.for_params(params)
  if family is None:
    names = ", ".join(map(str, list(params)[:4]))
    raise errors.InvalidInput(f"no model family holds parameters named {names}: register "
                              "one (vit_jax.models.family_registry.register)")
  return family.part("training", "the model")


def of_every_family() -> List[family_contract.TrainingRules]:
  """Every registered family's rules, in the registry's order."""
  return [family.training for family in family_registry.families()
          if family.training is not None]


def is_stacked(rules: family_contract.TrainingRules, name: str) -> bool:
  """Whether the parameter `name` (of params, or of a train state: opt_state/.../name) is
  in scan_layers' stacked blocks, whose leading axis is the depth."""
  return re.search(rf"(^|/){rules.blocks}/", name) is not None
