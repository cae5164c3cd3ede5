"""Named evaluation sets: the ReaL metric, sets from TFDS (in memory and streamed, over
several processes), optional sets, the primary set and config mistakes."""

import functools
import logging
import warnings

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest
import tensorflow_datasets as tfds
from sklearn import metrics as sk_metrics

from conftest import random_params, tiny_model
from helpers import demo_config, read_metrics, tiny_tfds_builder
from test_loop import polyak_config
from vit_jax.data import splits
from vit_jax.data.sources import tfds_builder
from vit_jax.data.tf_stack import tf_pipeline
from vit_jax.training import config_defaults, loop as train, sharding
from vit_jax.training.evaluators import classification

CLASSES = [str(d) for d in range(10)]  # the digits' class names, so sets line up with them
# ReaL-style label lists: several correct classes, one, or none (left out of the metric).
REAL_LABELS = [[3], [1, 7], [], [0, 2, 9], [5], [], [4, 4], [8], [6, 1], [2]]


def _image(index):
  return np.random.default_rng(index).integers(0, 256, (8, 8, 3), dtype=np.uint8)


# imagenet2012_real's features (image, real_label: a list of classes), 10 examples.
TinyReal = tiny_tfds_builder("TinyReal", {
    "image": tfds.features.Image(shape=(8, 8, 3)),
    "real_label": tfds.features.Sequence(tfds.features.ClassLabel(names=CLASSES))},
    {"validation": [{"image": _image(i), "real_label": labels}
                    for i, labels in enumerate(REAL_LABELS)]})
# An extra test set with the digits' classes (as imagenet_v2 has ImageNet's).
TinyV2 = tiny_tfds_builder("TinyV2", {
    "image": tfds.features.Image(shape=(8, 8, 3)),
    "label": tfds.features.ClassLabel(names=CLASSES)},
    {"test": [{"image": _image(100 + i), "label": i % 10} for i in range(7)]})


@pytest.fixture(name="tfds_dir", scope="module")
def fixture_tfds_dir(tmp_path_factory):
  root = tmp_path_factory.mktemp("tfds")
  for builder in (TinyReal, TinyV2):
    builder(data_dir=str(root)).download_and_prepare()
  return str(root)


def real_sums(logits, labels, mask):
  step = classification.make_real_eval_step(lambda_model(logits))
  return jax.device_get(step({}, {"image": jnp.zeros((len(mask), 1)), "label": labels,
                                  "mask": jnp.asarray(mask, jnp.float32)}))


def lambda_model(logits):
  """A stand-in module whose apply returns fixed logits."""
  class Fixed:
    @staticmethod
    def apply(variables, images, train):
      del variables, images, train
      return jnp.asarray(logits, jnp.float32)
  return Fixed


def test_real_metric_on_hand_made_cases():
  labels = np.zeros((5, 4), np.int32)
  labels[0, [1, 2]] = 1  # top-1 is 2: a hit on one of two labels
  labels[1, [0]] = 1     # top-1 is 3: a miss
  # row 2: no label at all: excluded
  labels[3, [3]] = 1     # a padding row (mask 0): counts nowhere
  labels[4, [0, 1, 2, 3]] = 1  # every class is correct: a hit
  logits = np.array([[0, 1, 5, 0], [0, 1, 2, 9], [9, 0, 0, 0], [0, 0, 0, 9], [1, 0, 0, 0]])
  sums = real_sums(logits, labels, [1, 1, 1, 0, 1])
  assert (sums["correct"], sums["examples"], sums["excluded"]) == (2, 3, 1)
  # loss: cross-entropy against the labels spread evenly over the listed classes
  log_p = jax.nn.log_softmax(jnp.asarray(logits, jnp.float32))
  expected = -(0.5 * (log_p[0, 1] + log_p[0, 2]) + log_p[1, 0] + jnp.mean(log_p[4]))
  assert sums["loss_sum"] == pytest.approx(float(expected), rel=1e-6)


@pytest.mark.parametrize("limit", [tfds_builder.IN_MEMORY_LIMIT_BYTES, 0], ids=["memory", "stream"])
def test_real_labels_read_as_multi_hot_once_across_processes(tfds_dir, monkeypatch, limit):
  monkeypatch.setattr(tfds_builder, "IN_MEMORY_LIMIT_BYTES", limit)
  config = demo_config(tfds_data_dir=tfds_dir)
  dataset = tf_pipeline.open_eval_dataset(config, "tiny_real", "validation", "real_label")
  assert isinstance(dataset.eval, splits.StreamingSplit) == (limit == 0)
  seen = []
  for process in range(2):
    for batch in dataset.eval_batches(batch_size=4, process_index=process, process_count=2):
      seen += [tuple(np.flatnonzero(row)) for row, m in zip(batch["label"], batch["mask"]) if m]
  assert sorted(seen) == sorted(tuple(sorted(set(labels))) for labels in REAL_LABELS)


def evals_config(tfds_dir, **overrides):
  """The demo run's settings (its compiled train step serves: XLA's persistent cache) with
  the two sets above."""
  evals = {"real": {"dataset": "tiny_real", "split": "validation", "metric": "real"},
           "v2": {"dataset": "tiny_v2", "split": "test"}}
  config = demo_config(tfds_data_dir=tfds_dir, **overrides)
  with config.unlocked():
    config.evals = ml_collections.ConfigDict(evals)
  return config


def test_evaluator_matches_a_reference_on_every_set(tfds_dir):
  config = evals_config(tfds_dir)
  module = tiny_model(num_classes=10)
  params = random_params(module, 16)  # no init to compile: any parameters serve
  mesh = sharding.make_mesh({"data": -1})
  evaluator = classification.Evaluator(config, module, mesh, tf_pipeline.open_dataset(config))
  metrics = evaluator(jax.device_put(params, sharding.replicated(mesh)), step=0)
  apply = jax.jit(functools.partial(module.apply, train=False))  # 41 batches of one shape
  for eval_set in evaluator.sets:
    correct = counted = 0
    pairs = []  # (label, prediction) of single-label sets
    for batch in eval_set.dataset.eval_batches(batch_size=8, process_index=0, process_count=1):
      top1 = np.argmax(apply({"params": params}, batch["image"]), -1)
      for label, pred, real in zip(batch["label"], top1, batch["mask"]):
        if real and eval_set.metric == "real" and label.any():
          correct, counted = correct + label[pred], counted + 1
        elif real and eval_set.metric == "accuracy":
          correct, counted = correct + (label == pred), counted + 1
          pairs.append((label, pred))
    name = eval_set.name
    assert metrics[f"eval/{name}/examples"] == counted
    assert metrics[f"eval/{name}/accuracy"] == pytest.approx(correct / counted)
    if pairs:  # per-class results from batches of 128 (300 = 2 x 128 + 44): as sklearn's
      true, predicted = np.array(pairs).T
      confusion = sk_metrics.confusion_matrix(true, predicted, labels=range(10))
      np.testing.assert_array_equal(evaluator.reports[f"eval/{name}"].confusion, confusion)
      with warnings.catch_warnings():  # classes predicted but absent: left out, as ours
        warnings.simplefilter("ignore")
        expected = sk_metrics.balanced_accuracy_score(true, predicted)
      assert metrics[f"eval/{name}/balanced_accuracy"] == pytest.approx(expected)
  assert [s.name for s in evaluator.sets] == ["test", "real", "v2"]
  assert metrics["eval/real/examples"] == 8 and metrics["eval/real/excluded"] == 2
  assert metrics["eval/v2/examples"] == 7 and metrics["eval/test/examples"] == 300
  assert metrics["eval/accuracy"] == metrics["eval/test/accuracy"]  # the primary set


@pytest.fixture(name="evals_run", scope="module")
def fixture_evals_run(tfds_dir, tmp_path_factory):
  """One short main job with both sets, 'real' its primary, and a Polyak average (so every
  set is evaluated raw too): test_loop's polyak_config programs, which XLA's persistent
  cache shares (the sets add no train program). (its workdir, its result, its log)."""
  config = evals_config(tfds_dir, eval_primary="real", **{
      key: polyak_config()[key] for key in ("polyak_decay", "total_steps", "eval_every",
                                            "checkpoint_every")})
  config.model.num_layers = polyak_config().model.num_layers
  workdir = tmp_path_factory.mktemp("evals") / "run"
  logger, records = logging.getLogger("vit_jax"), []
  handler = logging.Handler(logging.INFO)
  handler.emit = lambda record: records.append(record.getMessage())
  logger.addHandler(handler)
  level = logger.level
  logger.setLevel(logging.INFO)
  try:
    result = train.train_and_evaluate(config, str(workdir))
  finally:
    logger.removeHandler(handler)
    logger.setLevel(level)
  return workdir, result, "\n".join(records)


def test_main_job_logs_every_set_and_the_designated_primary(evals_run):
  workdir, result, log = evals_run
  assert result["eval/accuracy"] == result["eval/real/accuracy"]
  assert result["eval/examples"] == 8
  logged = [row for row in read_metrics(workdir) if "eval/accuracy" in row][-1]
  for name in ("test", "real", "v2"):
    assert logged[f"eval/{name}/accuracy"] == result[f"eval/{name}/accuracy"]
  assert "2 without a label left out" in log


def test_polyak_evaluates_every_set_raw_too(evals_run):
  assert {"eval_raw/real/accuracy", "eval_raw/v2/loss", "eval_raw/accuracy"} <= set(evals_run[1])


def test_an_optional_set_without_data_is_skipped_with_a_note(tfds_dir, caplog):
  config = evals_config(tfds_dir)
  with config.unlocked():
    config.evals.absent = {"dataset": "imagenet_v2", "split": "test", "optional": True}
  with caplog.at_level(logging.INFO, logger="vit_jax"):
    sets = classification.open_sets(config, tf_pipeline.open_dataset(config))
  assert [s.name for s in sets] == ["test", "real", "v2"]
  assert "eval set absent skipped: TFDS dataset imagenet_v2 is not prepared" in caplog.text
  config.evals.absent.optional = False
  with pytest.raises(FileNotFoundError, match="^config.evals.absent: TFDS dataset imagenet_v2 "
                     "is not prepared"):
    classification.open_sets(config, tf_pipeline.open_dataset(config))


def test_a_set_with_other_classes_is_refused(tmp_path, folder):
  config = demo_config()
  with config.unlocked():
    config.evals = ml_collections.ConfigDict({"pets": {"dataset": str(folder)}})
  with pytest.raises(ValueError, match="config.evals.pets: .* has 2 classes that differ from "
                     "the training set's 10"):
    classification.open_sets(config, tf_pipeline.open_dataset(config))


@pytest.mark.parametrize("evals, primary, message, objective", [
    ({"re al": {"dataset": "x"}}, "", "set names may hold letters", None),
    ({"test": {"dataset": "x"}}, "", "the name 'test' is taken by the dataset's own", None),
    ({"real": {"dataset": "x", "metrics": "real"}}, "", "unknown key\\(s\\) metrics", None),
    ({"real": {"split": "test"}}, "", "config.evals.real.dataset is missing", None),
    ({"real": {"dataset": "x", "metric": "top5"}}, "", "metric='top5' is not one of", None),
    ({}, "real", "config.eval_primary='real' names no eval set; choose one of test", None),
    ({"real": {"dataset": "x", "metric": "real"}}, "", "objective='mpp' does not make", "mpp"),
])
def test_eval_mistakes_are_refused_before_anything_runs(tmp_path, evals, primary, message,
                                                         objective):
  config = demo_config(eval_primary=primary)
  with config.unlocked():
    config.evals = ml_collections.ConfigDict(evals)
    config.objective = objective or config.objective
  with pytest.raises(ValueError, match=message):
    train.train_and_evaluate(config, str(tmp_path / "run"))
  assert not (tmp_path / "run").exists()


def test_imagenet_preset_adds_real_and_v2_when_present():
  config = config_defaults.finetune_config("ViT-B_16")
  assert config.evals.real.to_dict() == {"dataset": "imagenet2012_real", "split": "validation",
                                         "metric": "real", "optional": True}
  assert config.evals.v2.dataset == "imagenet_v2" and config.evals.v2.optional
  assert classification.own_set_name(config) == "validation"
  assert not config_defaults.finetune_config("ViT-B_16", "cifar10").evals  # test split only
  # the preset names exist in TFDS with the features the metrics read
  assert "real_label" in tfds.builder("imagenet2012_real").info.features
  assert tfds.builder("imagenet_v2").info.features["label"].num_classes == 1000
