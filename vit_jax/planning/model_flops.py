"""Model FLOPs of one example, what plan's and benchmark's MFU divide by: the analytic
matmul count of the model's family (2 per multiply-add), for an image model per image (its
Geometry), for an image-text pair per pair, tower by tower (its PairTraining). A training
step counts 3x the forward pass of what trains and 1x of a part the run freezes whole (a
locked image tower runs no backward pass: LiT); None where the family does not count."""

from typing import Dict, Optional

import ml_collections

from vit_jax.models import family_registry
from vit_jax.training import param_groups

IMAGE, PAIR = "image", "pair"  # what one example is: the unit of img/s or pairs/s


def forward_by_part(module, config: ml_collections.ConfigDict) -> Dict[str, Optional[float]]:
  """{top-level parameter name, or '' for the whole model: forward FLOPs of one example}."""
  family = family_registry.for_module(module)
  if family.geometry is not None:
    return {"": family.geometry.flops_per_image(module, config.pp.crop,
                                                config.pp.get("max_patches"))}
  if family.pair_training is not None:
    return dict(family.pair_training.flops(module, config))
  return {"": None}


def example(module) -> str:
  """IMAGE, or PAIR for a model its family counts by the pair."""
  family = family_registry.for_module(module)
  return PAIR if family.geometry is None and family.pair_training is not None else IMAGE


def forward(module, config: ml_collections.ConfigDict) -> Optional[float]:
  """FLOPs of one example's forward pass, or None where a part is not counted."""
  parts = forward_by_part(module, config).values()
  return None if any(flops is None for flops in parts) else sum(parts)


def train(module, config: ml_collections.ConfigDict, params, trained_regex: str = ""
          ) -> Optional[float]:
  """FLOPs of one example in a training step: 3x the forward of the parts that train, 1x
  of a part whose every parameter is frozen for the whole run (config.freeze without
  freeze_steps; LoRA's trained_regex leaves the adapters training). params: the module's
  params tree (abstract shapes will do)."""
  parts = forward_by_part(module, config)
  if any(flops is None for flops in parts.values()):
    return None
  groups = param_groups.named_leaves(param_groups.labels(params, config, trained_regex))

  def frozen(part: str) -> bool:
    labels = [label for name, label in groups if not part or name.startswith(f"{part}/")]
    return bool(labels) and all(label == param_groups.FROZEN for label in labels)

  return sum(flops * (1 if frozen(part) else 3) for part, flops in parts.items())
