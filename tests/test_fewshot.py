"""Few-shot linear evaluation: the ridge solver, the protocol, device features, the
command and the evaluator inside training."""

import functools
import json
import logging
import os

import jax
import numpy as np
import pytest
from absl import app, flags
from PIL import Image

from conftest import random_params, tiny_model
from helpers import demo_config, read_metrics, run_in_process, write_image, write_unicode_folder
from vit_jax import fewshot, make_arrayrecord
from vit_jax.checkpoints import npz
from vit_jax.data import splits
from vit_jax.data.tf_stack import tf_pipeline
from vit_jax.training import loop, sharding
from vit_jax.training.evaluators import fewshot_probes as probes


def ridge_reference(x, labels, num_classes, l2_reg):
  """The augmented least-squares system [[X, 1], [sqrt(l2) I]] W = [[Y], [0]]."""
  xa = np.concatenate([x, np.ones((len(x), 1))], axis=1).astype(np.float64)
  y = np.where(np.arange(num_classes) == labels[:, None], 1.0, -1.0)
  a = np.concatenate([xa, np.sqrt(l2_reg) * np.eye(xa.shape[1])])
  b = np.concatenate([y, np.zeros((xa.shape[1], num_classes))])
  return np.linalg.lstsq(a, b, rcond=None)[0]


@pytest.mark.parametrize("num, dim, num_classes", [(300, 12, 5), (9, 40, 4), (60, 7, 900)],
                         ids=["primal", "dual", "many-classes"])
def test_solver_matches_least_squares(monkeypatch, num, dim, num_classes):
  monkeypatch.setattr(probes, "_ROWS_PER_CHUNK", 64)  # several row chunks in the primal
  monkeypatch.setattr(probes, "_SCORES_PER_CHUNK", 2000)  # a few test rows per chunk
  rng = np.random.default_rng(num)
  x = rng.normal(size=(num, dim)).astype(np.float32)
  labels = rng.integers(0, num_classes, num)
  weights = probes.ridge_weights(x, labels, num_classes, 3.0)
  assert weights.shape == (dim + 1, num_classes)
  np.testing.assert_allclose(weights, ridge_reference(x, labels, num_classes, 3.0),
                             rtol=1e-8, atol=1e-10)

  test_x = rng.normal(size=(50, dim)).astype(np.float32)
  scores = np.concatenate([test_x, np.ones((50, 1))], axis=1) @ weights
  test_labels = np.where(rng.random(50) < 0.5, scores.argmax(1), rng.integers(0, num_classes, 50))
  expected = np.mean(scores.argmax(1) == test_labels)
  assert probes.accuracy(weights, test_x, test_labels) == pytest.approx(expected)
  for bad in (0, float("nan")):
    with pytest.raises(ValueError, match=f"l2_reg={bad} must be > 0 and finite"):
      probes.ridge_weights(x, labels, num_classes, bad)


def test_class_ranks_draw_nested_sets_of_k_per_class(caplog):
  labels = np.repeat(np.arange(4), [6, 6, 6, 2])
  ranks = probes.class_ranks(labels, np.random.default_rng(0))
  for k in (1, 5):
    assert list(np.bincount(labels[ranks < k])) == [k, k, k, min(k, 2)]
  assert not np.array_equal(ranks, probes.class_ranks(labels, np.random.default_rng(1)))
  x = np.eye(4)[labels] * 10
  with caplog.at_level(logging.WARNING):
    probes.fewshot_accuracies(x, labels, x, labels, shots=(1, 5), seeds=(0, 1))
  assert caplog.text.count("1 of 4 classes have fewer than 5 training examples") == 1


def clusters(rng, num_classes, per_class, dim, spread):
  means = rng.normal(size=(num_classes, dim)) * spread
  labels = np.repeat(np.arange(num_classes), per_class)
  return (means[labels] + rng.normal(size=(len(labels), dim))).astype(np.float32), labels


def test_separable_classes_are_learnt_and_random_labels_are_not():
  rng = np.random.default_rng(0)
  x, labels = clusters(rng, 10, 60, 32, spread=3.0)
  test_x, test_labels = clusters(np.random.default_rng(0), 10, 30, 32, spread=3.0)
  result = probes.evaluate_fewshot(x, labels, test_x, test_labels, shots=(1, 5, 25),
                                    seeds=(0, 1))
  assert set(result) == {"1shot", "1shot_std", "5shot", "5shot_std", "25shot", "25shot_std"}
  assert result["5shot"] >= 0.99 and result["25shot"] >= 0.99

  noise = rng.normal(size=(2000, 32)).astype(np.float32)
  result = probes.evaluate_fewshot(noise[:1000], rng.integers(0, 10, 1000), noise[1000:],
                                    rng.integers(0, 10, 1000), shots=(5, 25), seeds=(0, 1, 2),
                                    num_classes=10)
  assert abs(result["25shot"] - 0.1) < 0.04 and abs(result["5shot"] - 0.1) < 0.04


def test_device_features_equal_the_model_and_drop_padding():
  module = tiny_model(num_classes=5, representation_size=8)
  params = random_params(module, 16)  # no init to compile: any parameters serve
  rng = np.random.default_rng(0)
  split = lambda n: splits.IndexedSplit(rng.integers(0, 256, (n, 8, 8, 3), dtype=np.uint8),
                                    np.arange(n, dtype=np.int32) % 5, "pixels")
  dataset = tf_pipeline.Dataset(split(10), split(7), list("abcde"),
                         fewshot.data_config("digits", 16).pp, 1)
  mesh = sharding.make_mesh({"data": -1})
  shardings = sharding.param_shardings(params, mesh)
  feature_fn = probes.feature_function(module, mesh, shardings)
  params = jax.device_put(params, shardings)
  batch_size = 4 * sharding.batch_parallelism(mesh)
  reference = jax.jit(functools.partial(module.apply, representation=True))  # one program, not
  # one per operation
  for split_name, size in (("train", 10), ("eval", 7)):
    features, labels = probes.dataset_features(feature_fn, params, dataset, split_name,
                                                batch_size, sharding.batch_sharding(mesh))
    images = np.concatenate([b["image"] for b in dataset.eval_batches(
        batch_size=batch_size, process_index=0, process_count=1, split=split_name)])[:size]
    expected = reference({"params": params}, images)
    assert features.shape == (size, 8) and list(labels) == [i % 5 for i in range(size)]
    np.testing.assert_allclose(features, expected, rtol=1e-5, atol=1e-6)
    assert np.abs(features).max() <= 1  # pre_logits' tanh: not the logits


def write_folder(root, classes=3, per_class=6):
  """Images whose colour is their class, plus noise."""
  rng = np.random.default_rng(0)
  for split in ("train", "test"):
    for c in range(classes):
      os.makedirs(root / split / f"class{c}")
      for i in range(per_class):
        pixels = rng.uniform(0, 60, (20, 20, 3))
        pixels[..., c] += 180
        Image.fromarray(pixels.astype(np.uint8)).save(
            root / split / f"class{c}" / f"{i}.{'png' if i % 2 else 'jpg'}")


def run_command(*args):
  flag_values = flags.FlagValues()
  fewshot.define_flags(flag_values)
  argv = flag_values(["fewshot", *args])
  fewshot.main(argv, flag_values)


def test_command_prints_the_table_and_writes_json(tmp_path, capsys, monkeypatch):
  module = tiny_model(num_classes=5)
  npz.save_npz(random_params(module, 16), tmp_path / "tiny.npz")
  write_folder(tmp_path / "images")
  run_command(f"--checkpoint={tmp_path / 'tiny.npz'}", f"--dataset={tmp_path / 'images'}",
              "--shots=1,2,5", "--seeds=2", "--batch_size=5", f"--json={tmp_path / 'out.json'}")
  table = capsys.readouterr().out.splitlines()
  assert "32-d features, 3 classes, 18 train / 18 test examples" in table[0]
  rows = [line.split() for line in table[2:]]
  assert [int(r[0]) for r in rows] == [1, 2, 5]
  report = json.loads((tmp_path / "out.json").read_text())
  assert (report["num_train"], report["num_test"], report["seeds"]) == (18, 18, [0, 1])
  assert report["written_by"] == "vit_jax.fewshot"  # a rerun may replace it
  for k, row in zip((1, 2, 5), rows):
    assert float(row[1]) == pytest.approx(report[f"{k}shot"], abs=1e-4)
    assert report[f"{k}shot"] == pytest.approx(np.mean(report["per_seed"][str(k)]))
  assert report["5shot"] > 0.8  # colour separates the classes even with random weights
  monkeypatch.chdir(tmp_path)  # '-': the JSON on standard output, the table on stderr
  run_command(f"--checkpoint={tmp_path / 'tiny.npz'}", f"--dataset={tmp_path / 'images'}",
              "--shots=1,2,5", "--seeds=2", "--batch_size=5", "--json=-")
  printed = capsys.readouterr()
  assert json.loads(printed.out) == report and not (tmp_path / "-").exists()
  assert "32-d features, 3 classes" in printed.err


def test_command_runs_at_another_non_square_size(tmp_path, capsys):
  """--image_size=HxW on a 16 px checkpoint: the images are resized to 16x24 and the model
  resizes its position embedding."""
  npz.save_npz(random_params(tiny_model(num_classes=5), 16), tmp_path / "tiny.npz")
  write_folder(tmp_path / "images")
  run_command(f"--checkpoint={tmp_path / 'tiny.npz'}", f"--dataset={tmp_path / 'images'}",
              "--shots=5", "--seeds=1", "--batch_size=5", "--image_size=16x24")
  table = capsys.readouterr().out.splitlines()
  assert "32-d features, 3 classes, 18 train / 18 test examples" in table[0]
  assert float(table[2].split()[1]) > 0.8


def test_a_naflex_file_is_probed_at_its_recorded_budget(tmp_path, capsys, monkeypatch):
  """A NaFlex run's params.npz (its budget recorded) is probed as NaFlex without being
  asked: its NaFlexViT (the file's 4 x 4 table) on patches of each image; --max_patches=0
  probes the square model. The table says which reading."""
  # pylint: disable=import-outside-toplevel
  from vit_jax.families.vit import naflex_model
  npz.save_npz(random_params(tiny_model(num_classes=5, classifier="map"), 16),
               tmp_path / "naflex.npz", max_patches=12)
  write_folder(tmp_path / "images", per_class=2)
  modules = []
  feature_function = probes.feature_function
  monkeypatch.setattr(probes, "feature_function",
                      lambda module, *a: modules.append(module) or feature_function(module, *a))
  args = (f"--checkpoint={tmp_path / 'naflex.npz'}", f"--dataset={tmp_path / 'images'}",
          "--shots=1", "--seeds=1", "--batch_size=6")
  run_command(*args)
  assert capsys.readouterr().out.splitlines()[0].endswith("; NaFlex, 12 patches, from the file")
  assert isinstance(modules[-1], naflex_model.NaFlexViT) and modules[-1].posemb_grid == 4
  run_command(*args, "--max_patches=0")
  assert capsys.readouterr().out.splitlines()[0].endswith(
      "; square images, 16x16 px (asked for; the file records NaFlex at 12 patches)")
  assert not isinstance(modules[-1], naflex_model.NaFlexViT)
  with pytest.raises(SystemExit):
    run_command(*args, "--max_patches=1000000000")
  assert capsys.readouterr().err.startswith(
      "error: --max_patches=1000000000: a batch of 6 at that budget needs ")


def test_command_errors_are_one_line(tmp_path, capsys):
  write_folder(tmp_path / "images", per_class=1)
  with pytest.raises(SystemExit) as exit_info:
    run_command(f"--checkpoint={tmp_path / 'missing.npz'}", f"--dataset={tmp_path / 'images'}")
  assert exit_info.value.code == 1
  error = capsys.readouterr().err.strip()
  assert error.startswith("error: checkpoint not found: ") and "\n" not in error
  with pytest.raises(app.UsageError, match="--shots=0,x must be positive integers"):
    run_command(f"--checkpoint={tmp_path / 'missing.npz'}", "--dataset=digits", "--shots=0,x")
  notes = tmp_path / "notes.json"  # not a report of ours: never replaced
  notes.write_text("{}")
  with pytest.raises(SystemExit):
    run_command("--checkpoint=ViT-B_16", "--dataset=digits", f"--json={notes}")
  assert capsys.readouterr().err == (f"error: {notes} already exists and vit_jax.fewshot did "
                                     "not write it: name a new file, or pass --overwrite to "
                                     "replace it\n")
  assert notes.read_text() == "{}"
  write_image(tmp_path / "tags" / "train" / "a.png")  # multi-label: no one class per image
  write_image(tmp_path / "tags" / "test" / "b.png")
  for split, name in (("train", "a"), ("test", "b")):
    (tmp_path / "tags" / split / "labels.csv").write_text(f"path,labels\n{name}.png,x;y\n")
  npz.save_npz(random_params(tiny_model(num_classes=5), 16), tmp_path / "tiny.npz")
  with pytest.raises(SystemExit):
    run_command(f"--checkpoint={tmp_path / 'tiny.npz'}", f"--dataset={tmp_path / 'tags'}")
  assert capsys.readouterr().err == (
      f"error: few-shot probes need one class per image, and {tmp_path / 'tags'} is "
      "multi-label (any of its 2 classes on an image): pass a single-label dataset (class "
      "folders or a TFDS name)\n")
  with pytest.raises(flags.IllegalFlagValueError, match="'nan' is not a finite number"):
    run_command("--checkpoint=x.npz", "--dataset=digits", "--l2_reg=nan")


def test_training_logs_fewshot_metrics(tmp_path):
  """Every 4 steps and at the last; the demo run's settings otherwise, so that its compiled
  train step serves (XLA's persistent cache)."""
  config = demo_config()
  config.fewshot.update(dict(datasets=("digits",), shots=(1, 5), seeds=2, every_steps=4,
                             batch_size=256))
  loop.train_and_evaluate(config, str(tmp_path / "run"))
  rows = [r for r in read_metrics(tmp_path / "run") if "fewshot/digits_1shot" in r]
  assert [r["step"] for r in rows] == [4, 6]
  for row in rows:
    assert 0.1 < row["fewshot/digits_1shot"] <= row["fewshot/digits_5shot"] <= 1


def test_command_reads_non_ascii_names(tmp_path, capsys):
  module = tiny_model(num_classes=5)
  npz.save_npz(random_params(module, 16), tmp_path / "tiny.npz")
  root = write_unicode_folder(tmp_path / "données")
  run_command(f"--checkpoint={tmp_path / 'tiny.npz'}", f"--dataset={root}", "--shots=1,2",
              "--seeds=1", "--batch_size=4")
  assert "3 classes, 9 train / 9 test examples" in capsys.readouterr().out


def test_the_command_reads_arrayrecord_shards_with_the_grain_loader(tmp_path):
  """fewshot has no config.loader to set: shards are read by Grain, the rest by tf.data."""
  for split in ("train", "test"):
    for name in ("a", "b"):
      write_image(str(tmp_path / "images" / split / name / "0.png"))
  assert run_in_process(make_arrayrecord, str(tmp_path / "images"),
                        f"--output={tmp_path / 'shards'}").returncode == 0
  config = fewshot.data_config(str(tmp_path / "shards"), 16)
  assert config.loader == "grain" and fewshot.data_config("digits", 16).loader == "tf"
  dataset = probes.open_probe_dataset(config)
  assert dataset.info.num_classes == 2
