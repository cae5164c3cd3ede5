"""A multi-label image folder (generated coloured shapes: the labels are the colours in
the image) trains through the main job, cheaply (the full run to mAP 1.0: RESULTS.md):
sigmoid loss by default, mAP and F1 at every evaluation over the whole eval split, class
counts and balanced weights recorded, and a params.npz that predict reads as multi-label."""

import csv
import importlib.util
import json
import logging

import numpy as np
import pytest

import fork_server
from conftest import REPO
from helpers import demo_config, free_port, subprocess_env
from vit_jax import read_class_names
from vit_jax.checkpoints import class_names
from vit_jax.training import loop

_spec = importlib.util.spec_from_file_location("make_shapes", REPO / "benchmarks/make_shapes.py")
make_shapes = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(make_shapes)

# The demo's model and 16 px pipeline (as the digits'); 61 test images: batch_eval 32
# leaves a padded last batch. The full-size run (4,000 images at 32 px): RESULTS.md.
SETTINGS = dict(total_steps=80, warmup_steps=10, batch=32, batch_eval=32, eval_every=40,
                checkpoint_every=80, progress_every=40, class_weights="balanced")


@pytest.fixture(name="shapes", scope="module")
def fixture_shapes(tmp_path_factory):
  root = tmp_path_factory.mktemp("shapes")
  make_shapes.write_shapes(str(root), train=256, test=61, size=16)
  return root


def positives(split_dir):
  with open(split_dir / "labels.csv", newline="") as f:
    rows = list(csv.DictReader(f))
  return {name: sum(name in row["labels"].split(";") for row in rows)
          for name in sorted(make_shapes.COLOURS)}


@pytest.fixture(name="one_device_run", scope="module")
def fixture_one_device_run(shapes, tmp_path_factory):
  """The shapes run in this (1-device) process: (its workdir, its result, its log)."""
  workdir = tmp_path_factory.mktemp("one") / "run"
  logger = logging.getLogger("vit_jax")
  records = []
  handler = logging.Handler()
  handler.emit = lambda record: records.append(record.getMessage())
  logger.addHandler(handler)
  try:
    result = loop.train_and_evaluate(demo_config(dataset=str(shapes), **SETTINGS),
                                      str(workdir))
  finally:
    logger.removeHandler(handler)
  return workdir, result, "\n".join(records)


def test_the_shapes_folder_trains_to_a_high_map(shapes, one_device_run):
  workdir, result, log = one_device_run
  assert "multi-label data: config.loss=auto trains with sigmoid_xent" in log
  assert result["eval/examples"] == 61
  # Chance is the share of positives (~0.34); 80 steps reach ~0.74 (the full run: 1.0).
  assert result["eval/map"] > 0.6, result
  assert {"eval/f1_micro", "eval/f1_macro", "eval/test/map"} <= set(result)
  record = json.loads((workdir / "dataset.json").read_text())
  assert record["multi_label"] and record["train_class_counts"] == list(
      positives(shapes / "train").values())
  config = json.loads((workdir / "config.json").read_text())
  assert config["loss"] == "sigmoid_xent" and len(config["class_weights"]) == 6
  per_class = json.loads((workdir / "per_class_metrics.json").read_text())
  test_set = per_class["sets"]["eval/test"]  # every real row once, padding left out
  assert test_set["positives"] == list(positives(shapes / "test").values())
  assert np.mean([ap for ap in test_set["ap"] if ap is not None]) == pytest.approx(
      result["eval/map"])
  assert [w["name"] for w in result["eval/worst_classes"]] == [
      per_class["class_names"][i] for i in np.argsort(test_set["ap"], kind="stable")[:5]]
  assert not (workdir / "confusion_matrix.png").exists()  # single-label runs only
  params = str(workdir / "params.npz")
  assert read_class_names(params) == sorted(make_shapes.COLOURS)
  assert class_names.read_multi_label(params)


def test_two_processes_of_four_devices_score_every_example_once(shapes, one_device_run,
                                                               tmp_path):
  """The run's params evaluated on 2 processes x 4 CPU devices (tests/multilabel_mesh.py):
  each process reads its rows of every eval batch, the scores gathered are every
  example's once (the per-class positives of labels.csv exactly), and the metrics are
  those the one-device run computed from the same params."""
  workdir, one, _ = one_device_run
  out, address = tmp_path / "mesh.json", f"127.0.0.1:{free_port()}"
  workers = [fork_server.start(["multilabel_mesh", str(shapes), str(workdir / "params.npz"),
                                str(out), address, str(i), "2"], subprocess_env(4),
                               REPO / "tests", tmp_path / f"{i}.log") for i in range(2)]
  codes = [worker.wait(timeout=300) for worker in workers]
  assert codes == [0, 0], (tmp_path / "0.log").read_text()[-3000:]
  mesh = json.loads(out.read_text())
  assert mesh["devices"] == 8
  assert mesh["metrics"]["eval/test/examples"] == 61
  assert mesh["test"]["positives"] == list(positives(shapes / "test").values())
  for name in ("map", "f1_micro", "f1_macro", "loss", "accuracy"):
    assert mesh["metrics"][f"eval/{name}"] == pytest.approx(one[f"eval/{name}"], rel=1e-5), name
