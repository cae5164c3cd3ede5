"""Training objectives, chosen by `config.objective`: what the main job builds, minimises,
evaluates and exports. Each is one object with the `Objective` protocol:

  * classification (default): the VisionTransformer on the labels (objectives.classification);
  * mpp: masked patch prediction, self-supervised (objectives.mpp); labels unused;
  * classification with config.model.flexi_patch_sizes: FlexiViT, one model for several
    patch sizes (objectives.flexi);
  * classification with config.pp.max_patches: NaFlex, each image at its own aspect ratio
    (objectives.naflex);
  * contrastive: an image tower and a text tower on image-caption pairs
    (objectives.contrastive); labels unused.

vit_jax.training.update_step turns an objective's batch loss into the generic train step; its eval
step returns {'loss_sum', 'correct', 'examples'} sums over the real rows; its model answers
apply(..., representation=True) with the backbone's features, so few-shot probes run
whatever the objective. A new objective is one module here plus an entry in OBJECTIVES.
"""

from typing import Any, Callable, Optional, Protocol, Tuple

import jax.numpy as jnp
import ml_collections

from vit_jax.base import errors
from vit_jax.data import batch_spec
from vit_jax.training.objectives import classification, contrastive, flexi, mpp, naflex

DEFAULT = "classification"


class Objective(Protocol):
  name: str
  predicts_classes: bool  # class logits: ReaL sets, class names in params.npz

  def check(self, config: ml_collections.ConfigDict) -> None:
    """Refuses settings the objective cannot run with, before anything slow."""

  def create_model(self, config: ml_collections.ConfigDict, num_classes: int, *,
                   load_pretrained: bool) -> Tuple[Any, Optional[dict]]:
    """(module, host params of config.pretrained if load_pretrained, else None)."""

  def make_batch_loss(self, module, config: ml_collections.ConfigDict) -> Callable:
    """batch_loss(params, batch, rng) -> the scalar mean loss the train step minimises."""

  def make_eval_step(self, module, config: ml_collections.ConfigDict) -> Callable:
    """eval_step(params, batch) -> {'loss_sum', 'correct', 'examples'} over real rows."""

  def export_params(self, params: Any) -> Any:
    """Host params -> what params.npz holds."""


def sample_inputs(objective: Objective, config: ml_collections.ConfigDict,
                  patch_size: Optional[int]) -> Tuple[Any, ...]:
  """Zero inputs of one example that the objective's module.init takes: an objective's own
  (sample_inputs: an image and its caption's tokens), else an image of config.pp's size."""
  own = getattr(objective, "sample_inputs", None)
  if own is not None:
    return tuple(own(config))
  return (batch_spec.map_arrays(jnp.zeros, batch_spec.image(config, 1, patch_size)),)


OBJECTIVES = {"classification": classification.Classification(),
              "mpp": mpp.MaskedPatchPrediction(), "contrastive": contrastive.Contrastive()}


def get(config: ml_collections.ConfigDict) -> Objective:
  """The objective config.objective names (classification when the key is absent)."""
  name = config.get("objective", DEFAULT)
  if name not in OBJECTIVES:
    raise errors.InvalidInput(
        f"unknown config.objective={name!r}; choose one of {', '.join(OBJECTIVES)}")
  if naflex.max_patches(config) is not None:
    if name != "classification" or flexi.patch_sizes(config):
      what = "FlexiViT" if flexi.patch_sizes(config) else f"config.objective={name!r}"
      raise errors.InvalidInput(f"config.pp.max_patches={naflex.max_patches(config)} (NaFlex) "
                                f"trains a plain classifier, not {what}: pass "
                                "--config.pp.max_patches=0 (square crops)")
    return naflex.NaFlexClassification()
  if flexi.patch_sizes(config):
    if name != "classification":
      raise errors.InvalidInput(f"config.model.flexi_patch_sizes trains a classifier: leave it "
                                f"empty for config.objective={name!r}")
    return flexi.FlexiClassification(config)
  return OBJECTIVES[name]
