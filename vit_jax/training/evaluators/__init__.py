"""What a run measures besides its loss, as plug-ins found by their type name.

A config declares evaluators as `config.evals.<name> = {'type': KIND, ...}`, any number of
each kind (evaluators.instances; no 'type': a classification set). Every kind is a module
with TYPE (its name), check(config, predicts_classes) (refuses its instances' settings
before anything is read) and build(config, module, mesh, dataset, objective) -> its
Evaluators. An Evaluator opens and checks its data when built, owns its schedule (`due`),
and answers `run(state, step)` with named metrics. vit_jax.training.loop loops over them
without knowing their kinds; a new kind is one module here plus one line in KINDS.

  * classification: the dataset's own eval split and every classification set (accuracy,
    ReaL), every `config.eval_every` steps and at the end;
  * fewshot: linear probes of each instance's datasets (and of `config.fewshot.datasets`,
    the instance named 'fewshot'), every `every_steps` steps and at the end;
  * zeroshot and retrieval (image-text runs): zero-shot top-1 on a labelled set, recall@k
    both ways on captions, as python -m vit_jax.zeroshot computes them from the saved file.
"""

from typing import Dict, List, Protocol

import ml_collections

from vit_jax.training.evaluators import (caption_retrieval, classification, fewshot_probes,
                                         instances, zero_shot)


class Evaluator(Protocol):
  # The latest `run`'s per-class results ({'eval/<set>' or 'eval': scores.per_class.ClassReport},
  # written by vit_jax.training.runs.class_report); empty for kinds without them.
  reports: Dict[str, object]

  def due(self, step: int, total_steps: int) -> bool:
    """Whether `run` should measure the state of this step."""

  def run(self, state, step: int) -> Dict[str, float]:
    """{metric name: value} of a train state (vit_jax.training.update_step.TrainState)."""


class Kind(Protocol):
  """An evaluator plug-in: a module with these members."""
  TYPE: str  # what config.evals.<name>.type names it by

  def check(self, config: ml_collections.ConfigDict, predicts_classes: bool) -> None:
    """Refuses its instances' settings, before anything is read."""

  def build(self, config: ml_collections.ConfigDict, module, mesh, dataset,
            objective) -> List[Evaluator]:
    """The Evaluators of its instances (none when none are declared)."""


KINDS: Dict[str, Kind] = {kind.TYPE: kind for kind in (
    classification,
    fewshot_probes,
    zero_shot,
    caption_retrieval,
)}


def check_all(config: ml_collections.ConfigDict, objective) -> None:
  instances.check(config, KINDS)
  for kind in KINDS.values():
    kind.check(config, objective.predicts_classes)


def build_all(config: ml_collections.ConfigDict, module, mesh, dataset,
              objective) -> List[Evaluator]:
  """Every evaluator the config asks for; each opens (and checks) its data now."""
  return [evaluator for kind in KINDS.values()
          for evaluator in kind.build(config, module, mesh, dataset, objective)]
