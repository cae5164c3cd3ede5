"""What a run measures besides its loss, as plug-ins of one interface.

Every kind is a module with check(config, predicts_classes) (refuses settings before
anything is read) and build(config, module, mesh, dataset, objective) -> an Evaluator or None
(nothing asked for).
An Evaluator opens and checks its data when built, owns its schedule (`due`), and answers
`run(state, step)` with named metrics. vit_jax.training.loop loops over them without knowing their
kinds; a new kind is one module here plus an entry in KINDS.

  * classification: the dataset's own eval split and `config.evals` (accuracy, ReaL),
    every `config.eval_every` steps and at the end;
  * fewshot: linear probes of `config.fewshot.datasets`, every `config.fewshot.every_steps`
    steps and at the end.
"""

from typing import Dict, List, Protocol

import ml_collections

from vit_jax.training.evaluators import classification, fewshot_probes


class Evaluator(Protocol):
  # The latest `run`'s per-class results ({'eval/<set>' or 'eval': per_class.ClassReport},
  # written by vit_jax.training.runs.class_report); empty for kinds without them.
  reports: Dict[str, object]

  def due(self, step: int, total_steps: int) -> bool:
    """Whether `run` should measure the state of this step."""

  def run(self, state, step: int) -> Dict[str, float]:
    """{metric name: value} of a train state (vit_jax.training.update_step.TrainState)."""


KINDS = (classification, fewshot_probes)


def check_all(config: ml_collections.ConfigDict, objective) -> None:
  for kind in KINDS:
    kind.check(config, objective.predicts_classes)


def build_all(config: ml_collections.ConfigDict, module, mesh, dataset,
              objective) -> List[Evaluator]:
  """Every evaluator the config asks for; each opens (and checks) its data now."""
  built = (kind.build(config, module, mesh, dataset, objective) for kind in KINDS)
  return [evaluator for evaluator in built if evaluator is not None]
