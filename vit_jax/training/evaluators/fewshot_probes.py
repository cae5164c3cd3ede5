"""Few-shot linear evaluation of frozen features (ViT paper, section 4.1 "Metrics"): the
probes, the feature extraction and the in-training Evaluator of each instance of type
'fewshot' (config.evals.<name>, and config.fewshot); the command is vit_jax.fewshot.

For each seed and each k in shots: take k train examples per class, fit closed-form
L2-regularised least squares from the features to {-1, 1}^K targets (+1 for the true
class), and report the test accuracy of the argmax. Features are the model's
representation (the head's input), computed on all devices; the solve runs on the host
in float64 with bounded memory: the [N, K] target matrix is never built (X^T Y = 2 *
per-class sums - column sums) and test scores are made a chunk of rows at a time, so
ImageNet-21k's K = 21,843 classes fit.
"""

import dataclasses
import math
import os
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

import jax
import ml_collections
import numpy as np
import scipy.linalg
from jax.experimental import multihost_utils

from vit_jax.base import errors
from vit_jax.base.console import log
from vit_jax.data import device_batches, loaders
from vit_jax.training import config_defaults, sharding
from vit_jax.training.evaluators import instances
from vit_jax.training.objectives import naflex

_ROWS_PER_CHUNK = 4096  # train rows augmented to float64 at a time (primal solve)
_SCORES_PER_CHUNK = 1 << 22  # float64 test scores held at once: 32 MiB


# --- Ridge regression -------------------------------------------------------------------------


def _augmented(features: np.ndarray) -> np.ndarray:
  """[X, 1] in float64: the bias is one more weight row."""
  return np.concatenate([np.asarray(features, np.float64),
                         np.ones((len(features), 1))], axis=1)


def _targets_product(class_sums: np.ndarray) -> np.ndarray:
  """Y^T X [K, R] for Y in {-1, 1}^{N x K}, from the class sums of X's rows: 2 * class
  sums - total (every row is in exactly one class). In place: Y is never built."""
  total = class_sums.sum(axis=0)
  class_sums *= 2
  class_sums -= total
  return class_sums


def ridge_weights(features: np.ndarray, labels: np.ndarray, num_classes: int,
                  l2_reg: float) -> np.ndarray:
  """W [D+1, K] (bias row last) minimising ||[X, 1] W - Y||^2 + l2_reg ||W||^2.

  Solves the smaller system: primal (D+1)^2 when N >= D+1, dual N^2 otherwise; memory
  is O(D^2 + D K) in the primal case, however many examples there are.
  """
  if not 0 < l2_reg < math.inf:  # nan too
    raise errors.InvalidInput(f"l2_reg={l2_reg} must be > 0 and finite: the ridge makes the "
                              "system solvable")
  labels = np.asarray(labels)
  if labels.size and (labels.min() < 0 or labels.max() >= num_classes):
    raise errors.InvalidInput(
        f"labels must lie in [0, {num_classes}): got {labels.min()}..{labels.max()}")
  num, dim = features.shape[0], features.shape[1] + 1
  if num >= dim:
    gram, sums = np.zeros((dim, dim)), np.zeros((num_classes, dim))
    for start in range(0, num, _ROWS_PER_CHUNK):
      rows = _augmented(features[start:start + _ROWS_PER_CHUNK])
      gram += rows.T @ rows
      np.add.at(sums, labels[start:start + _ROWS_PER_CHUNK], rows)
    gram[np.diag_indices(dim)] += l2_reg
    return scipy.linalg.solve(gram, _targets_product(sums).T, assume_a="pos")
  rows = _augmented(features)  # dual: W = X^T G^-1 Y = (Y^T (G^-1 X))^T, G = X X^T + l2 I
  kernel = rows @ rows.T
  kernel[np.diag_indices(num)] += l2_reg
  mapped = scipy.linalg.solve(kernel, rows, assume_a="pos")
  sums = np.zeros((num_classes, dim))
  np.add.at(sums, labels, mapped)
  return _targets_product(sums).T


def accuracy(weights: np.ndarray, features: np.ndarray, labels: np.ndarray) -> float:
  """Top-1 accuracy of argmax([X, 1] W), scoring a bounded number of rows at a time."""
  rows = max(1, _SCORES_PER_CHUNK // weights.shape[1])
  correct = 0
  for start in range(0, len(features), rows):
    scores = _augmented(features[start:start + rows]) @ weights
    correct += int(np.sum(scores.argmax(axis=1) == labels[start:start + rows]))
  return correct / len(features)


# --- Few-shot protocol ------------------------------------------------------------------------


def class_ranks(labels: np.ndarray, rng: np.random.Generator) -> np.ndarray:
  """Each example's place in a random order of its class: k shots = ranks < k, so the
  k-shot sets of one seed are nested (less noise along the shots curve)."""
  order = rng.permutation(len(labels))
  order = order[np.argsort(labels[order], kind="stable")]
  grouped = labels[order]
  ranks = np.empty(len(labels), np.int64)
  ranks[order] = np.arange(len(labels)) - np.searchsorted(grouped, grouped)
  return ranks


def _warn_small_classes(labels: np.ndarray, num_classes: int, shots: int) -> None:
  counts = np.bincount(labels, minlength=num_classes)
  short = counts < shots
  if short.any():
    log.warning("%d of %d classes have fewer than %d training examples (fewest: %d): "
                    "their few-shot sets use all they have", short.sum(), num_classes, shots,
                    counts.min())


def fewshot_accuracies(train_features: np.ndarray, train_labels: np.ndarray,
                       test_features: np.ndarray, test_labels: np.ndarray, *,
                       shots: Sequence[int] = config_defaults.FEWSHOT_SHOTS,
                       seeds: Sequence[int] = (0, 1, 2),
                       l2_reg: float = config_defaults.FEWSHOT_L2_REG,
                       num_classes: Optional[int] = None) -> Dict[int, List[float]]:
  """{k: [test accuracy per seed]}. Classes with fewer than k train examples use all of
  theirs (one warning); num_classes defaults to the largest label + 1."""
  if not shots or min(shots) < 1:
    raise errors.InvalidInput(f"shots={tuple(shots)} must be positive integers, e.g. 1,5,10,25")
  if not seeds:
    raise errors.InvalidInput("no seeds: give at least one, e.g. seeds=(0, 1, 2)")
  train_labels, test_labels = np.asarray(train_labels), np.asarray(test_labels)
  if num_classes is None:
    num_classes = int(max(train_labels.max(), test_labels.max())) + 1
  _warn_small_classes(train_labels, num_classes, max(shots))
  results = {k: [] for k in shots}
  for seed in seeds:
    ranks = class_ranks(train_labels, np.random.default_rng(seed))
    for k in shots:
      chosen = ranks < k
      weights = ridge_weights(train_features[chosen], train_labels[chosen], num_classes, l2_reg)
      results[k].append(accuracy(weights, test_features, test_labels))
  return results


def summarize(per_seed: Dict[int, List[float]]) -> Dict[str, float]:
  """{'<k>shot': mean accuracy, '<k>shot_std': std over seeds, ...}."""
  summary = {}
  for k, accuracies in per_seed.items():
    summary[f"{k}shot"] = float(np.mean(accuracies))
    summary[f"{k}shot_std"] = float(np.std(accuracies))
  return summary


def evaluate_fewshot(train_features, train_labels, test_features, test_labels, *,
                     shots: Sequence[int] = config_defaults.FEWSHOT_SHOTS,
                     seeds: Sequence[int] = (0, 1, 2),
                     l2_reg: float = config_defaults.FEWSHOT_L2_REG,
                     num_classes: Optional[int] = None) -> Dict[str, float]:
  """Mean and std over seeds of the k-shot test accuracy: {'1shot': ..., '1shot_std': ...}."""
  return summarize(fewshot_accuracies(train_features, train_labels, test_features, test_labels,
                                      shots=shots, seeds=seeds, l2_reg=l2_reg,
                                      num_classes=num_classes))


# --- Features on devices ----------------------------------------------------------------------


def feature_function(module, mesh: jax.sharding.Mesh, param_shardings: Any):
  """Jitted (params, batch) -> (features [B, D] float32, labels, mask), batch-sharded."""
  batch_sharding = sharding.batch_sharding(mesh)

  def features(params, batch):
    x = module.apply({"params": params}, batch["image"], representation=True)
    return x, batch["label"], batch["mask"]

  return jax.jit(sharding.on_mesh(mesh, features),
                 in_shardings=(param_shardings, batch_sharding),
                 out_shardings=batch_sharding)


def compute_features(feature_fn, params, batches: Iterator[dict],
                     batch_sharding) -> Tuple[np.ndarray, np.ndarray]:
  """Host features [N, D] and labels [N] of every real (unpadded) example; every process
  gets all of them, gathered batch by batch."""
  features, labels = [], []
  for batch in device_batches.prefetch_to_device(batches, batch_sharding):
    x, y, mask = multihost_utils.process_allgather(feature_fn(params, batch), tiled=True)
    features.append(x[mask > 0])
    labels.append(y[mask > 0])
  return np.concatenate(features), np.concatenate(labels).astype(np.int64)


def dataset_features(feature_fn, params, dataset: loaders.Dataset, split: str, batch_size: int,
                     batch_sharding) -> Tuple[np.ndarray, np.ndarray]:
  """compute_features over one split ('train' or 'eval'), unaugmented."""
  batches = dataset.eval_batches(batch_size=batch_size, process_index=jax.process_index(),
                                 process_count=jax.process_count(), split=split)
  return compute_features(feature_fn, params, batches, batch_sharding)


def split_features(feature_fn, params, dataset: loaders.Dataset, batch_size: int,
                   batch_sharding) -> Tuple[np.ndarray, ...]:
  """(train features, train labels, test features, test labels): the probes' inputs;
  batch_sharding: the mesh's (sharding.batch_sharding), made once by the caller."""
  train = dataset_features(feature_fn, params, dataset, "train", batch_size, batch_sharding)
  test = dataset_features(feature_fn, params, dataset, "eval", batch_size, batch_sharding)
  return (*train, *test)


# --- During training --------------------------------------------------------------------------


def open_probe_dataset(config: ml_collections.ConfigDict) -> loaders.Dataset:
  """config.dataset opened for few-shot probes, which fit one class per image: multi-label
  data is refused in one line."""
  dataset = loaders.open_dataset(config, naflex.loader_patch_size(config))
  if dataset.info.multi_label:
    raise errors.InvalidInput(
        f"few-shot probes need one class per image, and {config.dataset} is multi-label "
        f"(any of its {dataset.info.num_classes} classes on an image): pass a "
        "single-label dataset (class folders or a TFDS name)")
  return dataset


def dataset_key(name: str) -> str:
  """Metric name of a dataset: its TFDS name, or a directory's base name."""
  return os.path.basename(os.path.normpath(os.path.expanduser(name)))


class Evaluator:
  """One instance's probes during training: datasets opened (and checked) once, up front;
  the feature function is compiled once, on the first call."""
  reports = {}  # no per-class results

  def __init__(self, config: ml_collections.ConfigDict, instance: instances.Instance, module,
               mesh: jax.sharding.Mesh):
    settings = instance.settings
    self.name, self.module, self.mesh = instance.name, module, mesh
    self.batch_sharding = sharding.batch_sharding(mesh)
    self.shots, self.seeds = tuple(settings.shots), tuple(range(settings.seeds))
    self.l2_reg, self.every_steps = settings.l2_reg, settings.every_steps
    self.batch_size = settings.batch_size
    sharding.check_batch_size(self.batch_size, mesh, f"{instance.key}.batch_size")
    self.datasets = {dataset_key(name): open_probe_dataset(_data_config(config, settings, name))
                     for name in settings.datasets}
    self._feature_fn = None

  def due(self, step: int, total_steps: int) -> bool:
    return step % self.every_steps == 0 or step == total_steps

  def run(self, state, step: int) -> Dict[str, float]:
    """{'<name>/<dataset>_<k>shot': ...} of the state's evaluated parameters."""
    del step
    return self(state.eval_params)

  def __call__(self, params) -> Dict[str, float]:
    """{'<name>/<dataset>_<k>shot': mean test accuracy over the seeds, ...}."""
    if self._feature_fn is None:
      shardings = jax.tree.map(lambda x: x.sharding, params)
      self._feature_fn = feature_function(self.module, self.mesh, shardings)
    results = {}
    for key, dataset in self.datasets.items():
      features = split_features(self._feature_fn, params, dataset, self.batch_size,
                                self.batch_sharding)
      summary = evaluate_fewshot(*features, shots=self.shots, seeds=self.seeds,
                                 l2_reg=self.l2_reg, num_classes=dataset.info.num_classes)
      log.info("%s/%s: %s", self.name, key, ", ".join(
          f"{k}-shot {summary[f'{k}shot']:.4f}" for k in self.shots))
      results.update({f"{self.name}/{key}_{k}shot": summary[f"{k}shot"] for k in self.shots})
    return results


def _data_config(config: ml_collections.ConfigDict, settings: ml_collections.ConfigDict,
                 name: str) -> ml_collections.ConfigDict:
  """The run's config pointed at one probe dataset and the instance's splits."""
  copy = config.copy_and_resolve_references()
  with copy.unlocked():
    copy.dataset = name
    copy.train_split, copy.eval_split = settings.train_split, settings.eval_split
  return copy


# --- The plug-in (vit_jax.training.evaluators) ------------------------------------------------

TYPE = "fewshot"  # config.evals.<name>.type
# Metric groups the run writes already: an instance's name is its metrics' group.
_TAKEN_NAMES = ("train", "eval", "eval_raw")


def declared(config: ml_collections.ConfigDict) -> List[instances.Instance]:
  """config.fewshot when it names datasets (the instance named 'fewshot': its metrics
  fewshot/<dataset>_<k>shot, as before kinds had names), then config.evals' fewshot
  instances, with the keys they leave out at config.fewshot's starting values."""
  legacy = ([instances.Instance(TYPE, "fewshot", config.fewshot)]
            if config.fewshot.datasets else [])
  return legacy + [dataclasses.replace(instance, settings=_with_defaults(instance.settings))
                   for instance in instances.of_type(config, TYPE)]


def _with_defaults(settings: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
  return ml_collections.ConfigDict({**config_defaults.fewshot_settings().to_dict(),
                                    **dict(settings.items())})


def check(config: ml_collections.ConfigDict, predicts_classes: bool) -> None:
  """Unknown keys, names and datasets, refused before anything is read (the batch size is
  checked against the mesh when built)."""
  del predicts_classes  # probes fit the backbone's features, whatever the objective
  keys = ("type", *config_defaults.fewshot_settings().keys())
  found = declared(config)
  for instance in found:
    where = f"config.{instance.key}"
    unknown = sorted(set(instance.settings.keys()) - set(keys))
    if unknown:
      raise errors.InvalidInput(f"{where} has unknown key(s) {', '.join(unknown)}; its keys "
                                f"are {', '.join(keys)}")
    if instance.name in _TAKEN_NAMES:
      raise errors.InvalidInput(
          f"{where}: the name {instance.name!r} is a metric group the run writes already "
          f"({', '.join(_TAKEN_NAMES)}); pick another name")
    datasets = instance.settings.datasets
    if not datasets or isinstance(datasets, str):
      raise errors.InvalidInput(f"{where}.datasets must list datasets to probe, e.g. "
                                "('digits',) or ('cifar100', '/data/my_images')")
    dataset_keys = [dataset_key(name) for name in datasets]
    twice = sorted({key for key in dataset_keys if dataset_keys.count(key) > 1})
    if twice:
      raise errors.InvalidInput(
          f"{where}.datasets names {twice[0]!r} twice; give each dataset once")
  if [instance.name for instance in found].count(TYPE) > 1:
    raise errors.InvalidInput(
        "config.fewshot.datasets and config.evals.fewshot both declare the probes named "
        "'fewshot': move config.fewshot's settings into config.evals.fewshot, or rename it")


def build(config: ml_collections.ConfigDict, module, mesh: jax.sharding.Mesh, dataset,
          objective) -> List[Evaluator]:
  """One Evaluator per declared instance (none when none is declared)."""
  del dataset, objective  # the probes read their own datasets and the model's features
  return [Evaluator(config, instance, module, mesh) for instance in declared(config)]
