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

from conftest import REPO
from helpers import demo_config
from vit_jax import read_class_names, train
from vit_jax.checkpoints import class_names

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


def test_the_shapes_folder_trains_to_a_high_map(shapes, tmp_path, caplog):
  workdir = tmp_path / "run"
  with caplog.at_level(logging.INFO, logger="vit_jax"):
    result = train.train_and_evaluate(demo_config(dataset=str(shapes), **SETTINGS),
                                      str(workdir))
  assert "multi-label data: config.loss=auto trains with sigmoid_xent" in caplog.text
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
