"""Top-1 accuracy and loss over named evaluation sets, every example counted once.

A run evaluates its dataset's own eval split plus the classification sets of
`config.evals` (name -> {type: 'classification' or left out, dataset, split, metric,
optional}), e.g. ImageNet's validation split, ReaL and ImageNet-V2 in one fine-tuning run
(paper Table 2). Each set is logged as eval/<name>/{accuracy,loss,examples}; the primary
set (`config.eval_primary`, default the dataset's own split) also writes the plain
eval/accuracy, eval/loss and eval/examples that dashboards and the end-of-run summary read.

Metrics: 'accuracy' (the top-1 class is the label; also per-class recall and precision,
eval/<name>/balanced_accuracy and the confusion matrix: scores.per_class) and 'real'
(ImageNet ReaL, Beyer et al. 2020: the top-1 class is one of the example's re-assessed
labels; examples without any label are left out and counted as eval/<name>/excluded).
An 'accuracy' set of multi-label data is scored by scores.multilabel instead (mAP,
F1 micro and macro, per-class AP).
"""

import dataclasses
import re
from typing import Callable, Dict, List, Optional, Tuple

import jax
import jax.numpy as jnp
import ml_collections

from vit_jax.base import errors
from vit_jax.base.console import log
from vit_jax.data import device_batches, loaders
from vit_jax.training import objectives, sharding, update_step
from vit_jax.training.evaluators import instances
from vit_jax.training.objectives import naflex
from vit_jax.training.scores import multilabel, per_class

TYPE = instances.DEFAULT_TYPE  # config.evals.<name>.type; a set without one is one too

# metric -> the TFDS feature holding the labels it scores.
LABEL_FEATURES = {"accuracy": "label", "real": "real_label"}
SET_KEYS = ("type", "dataset", "split", "metric", "optional")
# Metrics of the primary set that are also written without the set's name (eval/<metric>).
_PRIMARY_EXTRAS = ("balanced_accuracy", "map", "f1_micro", "f1_macro")


def make_real_eval_step(model):
  """eval_step(params, batch) -> sums for batch['label'] multi-hot [B, K] (ReaL).

  Correct: the argmax class is among the example's labels. Examples with no label are
  `excluded` and count nowhere else. `loss_sum` is the cross-entropy against the labels
  spread evenly over the listed classes.
  """
  def eval_step(params, batch):
    logits = model.apply({"params": params}, batch["image"], train=False)
    labels = batch["label"].astype(jnp.float32)
    num_labels = jnp.sum(labels, axis=-1)
    real = batch["mask"] > 0
    counted = real & (num_labels > 0)
    top1 = jnp.argmax(logits, axis=-1)
    correct = jnp.take_along_axis(labels, top1[:, None], axis=-1)[:, 0] > 0
    target = labels / jnp.maximum(num_labels, 1.0)[:, None]
    masked_sum = lambda x: jnp.sum(jnp.where(counted, x, 0.0))
    return {"loss_sum": masked_sum(objectives.classification.softmax_xent(logits, target)),
            "correct": masked_sum(correct.astype(jnp.float32)),
            "examples": jnp.sum(counted, dtype=jnp.float32),
            "excluded": jnp.sum(real & (num_labels == 0), dtype=jnp.float32)}

  return eval_step


def own_set_name(config: ml_collections.ConfigDict) -> str:
  """The name of the dataset's own eval split: its TFDS split name ('test',
  'validation'; slicing dropped), 'test' for the digits and image directories."""
  if config.dataset == "digits" or not config.eval_split:
    return "test"
  return re.sub(r"\W+", "_", config.eval_split.split("[")[0]).strip("_") or "test"


def check(config: ml_collections.ConfigDict, predicts_classes: bool) -> None:
  """Classification sets' / eval_primary mistakes, refused before anything is read (set
  names and types: evaluators.instances)."""
  names = [own_set_name(config)]
  for instance in instances.of_type(config, TYPE):
    name, spec, where = instance.name, instance.settings, f"config.{instance.key}"
    if name in names:
      raise errors.InvalidInput(
          f"{where}: the name {name!r} is taken by the dataset's own eval split; "
          "pick another name")
    names.append(name)
    unknown = sorted(set(spec.keys()) - set(SET_KEYS))
    if unknown:
      raise errors.InvalidInput(
          f"{where} has unknown key(s) {', '.join(unknown)}; its keys are "
          f"{', '.join(SET_KEYS)}")
    if not spec.get("dataset"):
      raise errors.InvalidInput(f"{where}.dataset is missing: a TFDS name, a directory or 'digits'")
    metric = spec.get("metric", "accuracy")
    if metric not in LABEL_FEATURES:
      raise errors.InvalidInput(
          f"{where}.metric={metric!r} is not one of "
          f"{', '.join(LABEL_FEATURES)}")
    if metric == "real" and not predicts_classes:
      raise errors.InvalidInput(
          f"{where}.metric='real' needs class predictions, which "
          f"config.objective={config.get('objective')!r} does not make: drop the set "
          f"(--config.evals.{name}.metric=accuracy evaluates its objective)")
  primary = config.get("eval_primary", "")
  if primary and primary not in names:
    raise errors.InvalidInput(
        f"config.eval_primary={primary!r} names no eval set; choose one of "
        f"{', '.join(names)}")


def jit_eval_step(eval_step: Callable, mesh) -> Callable:
  """The jitted eval step of a run: params as the train state holds them, batches over the
  mesh's batch axes, sums replicated (vit_jax.planning.compiled_plan compiles this same
  function)."""
  return jax.jit(sharding.on_mesh(mesh, eval_step), out_shardings=sharding.replicated(mesh))


@dataclasses.dataclass
class EvalSet:
  name: str
  dataset: loaders.Dataset
  metric: str


def _absent(error: Exception) -> bool:
  """Data that is not prepared (an optional set is then skipped), not a broken setting."""
  return isinstance(error, FileNotFoundError)


def open_sets(config: ml_collections.ConfigDict, dataset: loaders.Dataset) -> List[EvalSet]:
  """The dataset's own eval split first, then the classification sets in name order; an
  optional set whose data is absent is skipped with a note. Each must have the training
  classes."""
  sets = [EvalSet(own_set_name(config), dataset, _scored_by("accuracy", dataset))]
  for instance in instances.of_type(config, TYPE):
    name, spec = instance.name, instance.settings
    metric = spec.get("metric", "accuracy")
    try:
      opened = loaders.open_eval_dataset(config, spec.dataset, spec.get("split", "test"),
                                          LABEL_FEATURES[metric],
                                          naflex.loader_patch_size(config))
    except (FileNotFoundError, ValueError) as e:
      if spec.get("optional", False) and _absent(e):
        log.info("eval set %s skipped: %s", name, " ".join(str(e).split()))
        continue
      raise type(e)(f"config.evals.{name}: {e}") from None
    if opened.info.class_names != dataset.info.class_names:
      raise errors.InvalidInput(
          f"config.evals.{name}: {spec.dataset} has {opened.info.num_classes} classes that "
          f"differ from the training set's {dataset.info.num_classes} ({config.dataset}); "
          "evaluate only on sets labelled with the same classes")
    sets.append(EvalSet(name, opened, _scored_by(metric, opened)))
  return sets


def _scored_by(metric: str, dataset: loaders.Dataset) -> str:
  """The step that scores a set: 'multilabel' for an 'accuracy' set of multi-label data."""
  return "multilabel" if metric == "accuracy" and dataset.info.multi_label else metric


def _extras(results: Dict[str, float]) -> str:
  """The per-class summaries for the console line."""
  shown = {"balanced_accuracy": "balanced accuracy", "map": "mAP", "f1_micro": "F1 micro",
           "f1_macro": "F1 macro"}
  return "".join(f", {label} {results[key]:.4f}" for key, label in shown.items()
                 if key in results)


class Evaluator:
  """config.evals during training: the sets are opened (and checked) up front, each
  metric's step is compiled on first use. `eval_step` replaces the 'accuracy' step (an
  objective other than classification brings its own). The config is checked once, before
  anything is opened (`check`, through evaluators.check_all)."""

  def __init__(self, config: ml_collections.ConfigDict, module, mesh,
               dataset: loaders.Dataset, eval_step: Optional[Callable] = None,
               predicts_classes: bool = True):
    self.config, self.mesh = config, mesh
    self.batch_sharding = sharding.batch_sharding(mesh)
    self.sets = open_sets(config, dataset)
    if not predicts_classes:  # labels unused: the objective's own step scores every set
      self.sets = [dataclasses.replace(s, metric="accuracy") if s.metric == "multilabel"
                   else s for s in self.sets]
    self.primary = config.get("eval_primary", "") or self.sets[0].name
    if self.primary not in [s.name for s in self.sets]:
      raise errors.InvalidInput(
          f"config.eval_primary={self.primary!r}: that set was skipped (its data "
          "is absent); prepare it or choose another primary set")
    self._steps = {"accuracy": eval_step or objectives.classification.make_eval_step(module),
                   "real": make_real_eval_step(module),
                   "multilabel": multilabel.make_eval_step(module)}
    self._compiled = {}
    self.reports: Dict[str, per_class.ClassReport] = {}  # of the latest `run`

  def _step(self, metric: str):
    if metric not in self._compiled:
      self._compiled[metric] = jit_eval_step(self._steps[metric], self.mesh)
    return self._compiled[metric]

  def evaluate(self, params, eval_set: EvalSet) -> Tuple[Dict[str, float],
                                                         Optional[per_class.ClassReport]]:
    """Sums over the whole split, then ({'accuracy', 'loss', 'examples'[, 'excluded',
    'balanced_accuracy']}, the per-class report or None)."""
    step = self._step(eval_set.metric)
    totals, rows = None, []
    for batch in eval_set.dataset.eval_batches(batch_size=self.config.batch_eval,
                                               process_index=jax.process_index(),
                                               process_count=jax.process_count()):
      sums = step(params, device_batches.to_global(batch, self.batch_sharding))
      if "rows" in sums:  # replicated: the whole global batch, on every process
        rows.append(sums.pop("rows"))  # fetched with the sums: no wait per batch
      totals = sums if totals is None else jax.tree.map(jnp.add, totals, sums)
    if totals is None:
      raise errors.InvalidInput(f"eval set {eval_set.name}: its split yielded no batch (no "
                                "examples); point it at a split that has some")
    totals, rows = jax.device_get((totals, rows))
    arrays = {k: v for k, v in totals.items() if getattr(v, "ndim", 0)}
    totals = {k: float(v) for k, v in totals.items() if k not in arrays}
    examples = totals.pop("examples")
    results = {"accuracy": totals.pop("correct") / max(examples, 1.0),
               "loss": totals.pop("loss_sum") / max(examples, 1.0), "examples": examples}
    for key in [k for k in totals if k.startswith(("correct_", "loss_sum_"))]:  # variants
      name = key.replace("correct_", "accuracy_").replace("loss_sum_", "loss_")
      results[name] = totals.pop(key) / max(examples, 1.0)  # (FlexiViT's patch sizes)
    report, names = None, eval_set.dataset.info.class_names
    if rows:
      scalars, report = multilabel.summarize(rows, names, self.config.get(
          "threshold", multilabel.DEFAULT_THRESHOLD))
      totals.update(scalars)
    elif arrays:
      scalars, report = per_class.summarize(arrays, names)
      totals.update(scalars)
    return {**results, **totals}, report

  def __call__(self, params, step: int, prefix: str = "eval") -> Dict[str, float]:
    """eval/<set>/<metric> for every set, plus eval/<metric> of the primary set; the
    per-class reports go to self.reports (keyed eval/<set>, and eval for the primary)."""
    metrics = {}
    for eval_set in self.sets:
      results, report = self.evaluate(params, eval_set)
      metrics.update({f"{prefix}/{eval_set.name}/{k}": v for k, v in results.items()})
      if report is not None:
        self.reports[f"{prefix}/{eval_set.name}"] = report
      if eval_set.name == self.primary:
        metrics.update({f"{prefix}/{k}": results[k] for k in ("accuracy", "loss", "examples")
                        + _PRIMARY_EXTRAS if k in results})
        if report is not None:
          self.reports[prefix] = report
      excluded = (f", {results['excluded']:.0f} without a label left out"
                  if "excluded" in results else "")
      log.info("step %d: %s %s accuracy %.4f%s, loss %.4f on %d examples%s", step, prefix,
               eval_set.name, results["accuracy"], _extras(results), results["loss"],
               results["examples"], excluded)
    return metrics

  def due(self, step: int, total_steps: int) -> bool:
    return step % self.config.eval_every == 0 or step == total_steps

  def run(self, state: update_step.TrainState, step: int) -> Dict[str, float]:
    """eval/* of the evaluated parameters (the Polyak average when on), plus eval_raw/*
    of the raw parameters when they differ."""
    self.reports = {}
    metrics = self(state.eval_params, step)
    if state.polyak is not None:
      metrics.update(self(state.params, step, prefix="eval_raw"))
    return metrics


def build(config: ml_collections.ConfigDict, module, mesh, dataset: loaders.Dataset,
          objective) -> List[Evaluator]:
  """One evaluator of the dataset's eval split and every classification set (they share
  the primary set and the compiled steps), scored by the objective's eval step ('accuracy'
  sets) and ReaL's ('real' sets)."""
  return [Evaluator(config, module, mesh, dataset,
                    eval_step=objective.make_eval_step(module, config),
                    predicts_classes=objective.predicts_classes)]
