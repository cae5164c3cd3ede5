"""The VTAB-1k runner (vit_jax.vtab.runner) and its command (vit_jax.vtab): real tiny
runs on image folders, group means and the table, the sweep, reruns, usage errors."""

import json
import logging
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
from absl import app, flags
from PIL import Image

from conftest import REPO, random_params, tiny_model
from helpers import read_metrics, write_image
from vit_jax import save_npz
from vit_jax.base import cli, no_clobber, storage
from vit_jax.training import loop
from vit_jax.vtab import __main__ as command
from vit_jax.vtab import runner as vtab  # the runs; `command` is python -m vit_jax.vtab

FOLDERS = {"alpha": 0, "beta": 3, "gamma": 6}  # folder -> test images with the wrong label
TINY = {"batch": 16, "batch_eval": 16, "total_steps": 4, "accum_steps": 1, "pp.crop": 16,
        "progress_every": 2, "checkpoint_every": 4}


def write_folder(root, wrong: int):
  """1,000 train images (light / dark 8x8 squares, hard links of two files) and 12 test
  images, `wrong` of them filed under the other class."""
  shades = {}
  for light, shade in ((True, 200), (False, 40)):
    shades[light] = root / f"{shade}.png"
    os.makedirs(root, exist_ok=True)
    Image.fromarray(np.full((8, 8, 3), shade, np.uint8)).save(shades[light])
  for split, count in (("train", 1000), ("test", 12)):
    for i in range(count):
      light = i % 2 == 0
      filed = light != (split == "test" and i < wrong)
      folder = root / split / ("light" if filed else "dark")
      os.makedirs(folder, exist_ok=True)
      os.link(shades[light], folder / f"{i}.png")


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
  root = tmp_path_factory.mktemp("folders")
  for name, wrong in FOLDERS.items():
    write_folder(root / name, wrong)
  return root


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
  """A tiny model's params.npz in the released layout (3 classes: every task replaces the
  head)."""
  path = tmp_path_factory.mktemp("checkpoint") / "tiny.npz"
  save_npz(random_params(tiny_model(num_classes=3), 16), str(path))  # no init to compile
  return str(path)


@pytest.fixture(name="three_tasks", scope="module")
def fixture_three_tasks(folders, checkpoint, tmp_path_factory):
  """The benchmark of the three folders with TINY settings, finished: (its workdir, its
  report). A rerun that trains nothing may run in it; one that trains copies it first."""
  workdir = tmp_path_factory.mktemp("three") / "work"
  specs = [str(folders / name) for name in FOLDERS]
  return workdir, vtab.run_benchmark(vtab.base_config(), specs, checkpoint=checkpoint,
                                     workdir=str(workdir), overrides=TINY,
                                     train_fn=loop.train_and_evaluate)


def read_json(*parts):
  with open(os.path.join(*parts), encoding="utf-8") as f:
    return json.load(f)


def test_three_folders_end_to_end_then_rerun_skips(three_tasks, folders, checkpoint,
                                                   monkeypatch, caplog):
  workdir, report = str(three_tasks[0]), three_tasks[1]
  specs = [str(folders / name) for name in FOLDERS]
  assert read_json(workdir, "vtab.json") == json.loads(json.dumps(report))
  top1 = {}
  for name in FOLDERS:
    final = read_json(workdir, name, "final_metrics.json")
    task = report["tasks"][name]
    top1[name] = task["top1"]
    assert (task["top1"], task["examples"], task["group"]) == (
        final["eval/accuracy"], 12, "custom")
    assert (task["base_lr"], task["total_steps"]) == (0.01, 4)
    config = read_json(workdir, name, "config.json")
    assert (config["dataset"], config["train_split"], config["eval_split"]) == (
        str(folders / name), "train800val200", "test")
    assert (config["pretrained"], config["model_name"], config["model"]["patch_size"],
            config["model"]["hidden_size"], config["warmup_steps"]) == (
                checkpoint, "ViT-Ti_16", 4, 32, 1)
    assert (config["pp"]["preset"], config["pp"]["resize"], config["pp"]["flip"]) == (
        "bit", None, True)
  mean = sum(top1.values()) / 3
  assert report["groups"] == {"custom": {"mean": pytest.approx(mean), "tasks": 3}}
  assert (report["mean"], report["num_tasks"]) == (pytest.approx(mean), 3)
  table = (three_tasks[0] / "vtab.md").read_text()
  for name in FOLDERS:
    assert f"| Custom | {name} | {100 * top1[name]:.2f} | 0.01 | 4 |" in table
  assert f"| **Custom mean** | 3 tasks, in no VTAB group | **{100 * mean:.2f}** | | |" in table
  assert f"| **Mean** | 3 tasks, 3 custom included | **{100 * mean:.2f}** | | |" in table

  def no_training(config, workdir):
    raise AssertionError(f"trained again in {workdir}")
  monkeypatch.setattr(loop, "train_and_evaluate", no_training)
  with caplog.at_level(logging.INFO, logger="vit_jax"):
    again = vtab.run_benchmark(vtab.base_config(), specs, checkpoint=checkpoint,
                               workdir=workdir, overrides=TINY, train_fn=loop.train_and_evaluate)
  assert again == report
  assert caplog.text.count("final run: skipped, already finished") == 3
  assert "task 3 of 3: gamma (custom)" in caplog.text


def test_rerun_with_other_settings_trains_anew_and_keeps_the_old_run(three_tasks, folders,
                                                                      checkpoint, tmp_path,
                                                                      caplog):
  """Settings that differ from a task's finished run (here the steps) must not reuse or
  resume it: the old run moves to superseded/1 untouched and the task trains anew. The
  second run has the sweep's steps and learning rate below: one compiled train step."""
  workdir, spec = tmp_path / "work", [str(folders / "alpha")]
  shutil.copytree(three_tasks[0], workdir)  # alpha's finished run, and two more
  first = three_tasks[1]
  old_files = {p.name: p.read_bytes() for p in (workdir / "alpha").iterdir() if p.is_file()
               and p.name != "run.lock"}
  with caplog.at_level(logging.WARNING, logger="vit_jax"):
    second = vtab.run_benchmark(vtab.base_config(), spec, checkpoint=checkpoint,
                                workdir=str(workdir), overrides={**TINY, "total_steps": 6},
                                train_fn=loop.train_and_evaluate)
  assert "holds a run with other settings (eval_every, total_steps)" in caplog.text
  kept = workdir / "alpha" / "superseded" / "1"
  assert {p.name: p.read_bytes() for p in kept.iterdir() if p.is_file()} == old_files
  assert (kept / "checkpoints").is_dir()
  assert second["tasks"]["alpha"]["total_steps"] == 6
  assert read_json(workdir, "alpha", "config.json")["total_steps"] == 6
  rows = read_metrics(workdir / "alpha")
  assert max(row["step"] for row in rows) == 6 and min(row["step"] for row in rows) <= 2
  assert first["tasks"]["alpha"]["total_steps"] == 4


def fake_training(accuracies, calls):
  """A train_fn returning accuracies[(task, eval split, lr, steps)] (or [task]) without
  training, recording each call's config."""
  def train_fn(config, workdir):
    task = os.path.basename(config.dataset)
    calls.append({"task": task, "workdir": workdir, **{k: config[k] for k in (
        "train_split", "eval_split", "base_lr", "total_steps", "warmup_steps", "eval_every")},
                  "resize": config.pp.resize, "flip": config.pp.flip})
    key = (task, config.eval_split, config.base_lr, config.total_steps)
    return {"eval/accuracy": accuracies.get(key, accuracies.get(task)), "eval/loss": 1.0,
            "eval/examples": 100.0}
  return train_fn


def test_group_means_and_the_table(folders, tmp_path):
  custom = tmp_path / "my_images"
  custom.symlink_to(folders / "alpha")  # a folder that can be a task (checked up front)
  accuracies = {"dtd": 0.5, "svhn": 0.7, "eurosat": 0.9, "clevr_count": 0.3,
                "dsprites_location": 0.4, "my_images": 0.8}
  calls = []
  report = vtab.run_benchmark(
      vtab.base_config(), ["svhn", str(custom), "dsprites_location", "dtd", "eurosat",
                           "clevr_count"], checkpoint="ViT-B_16", workdir=str(tmp_path / "w"),
      train_fn=fake_training(accuracies, calls))
  assert list(report["tasks"]) == ["dtd", "svhn", "eurosat", "clevr_count",
                                   "dsprites_location", "my_images"]  # VTAB order, custom last
  means = {group: summary["mean"] for group, summary in report["groups"].items()}
  assert means == pytest.approx({"natural": 0.6, "specialized": 0.9, "structured": 0.35,
                                 "custom": 0.8})
  assert report["groups"]["natural"]["of"] == 7 and report["groups"]["structured"]["tasks"] == 2
  assert report["mean"] == pytest.approx(0.6)  # over the 6 tasks, not over the group means
  # The paper's setting, and BiT's augmentation per task at 384 px.
  by_task = {call["task"]: call for call in calls}
  assert by_task["dtd"] == {"task": "dtd", "workdir": str(tmp_path / "w" / "dtd"),
                            "train_split": "train800val200", "eval_split": "test",
                            "base_lr": 0.01, "total_steps": 2500, "warmup_steps": 500,
                            "eval_every": 2500, "resize": None, "flip": True}
  assert (by_task["clevr_count"]["resize"], by_task["clevr_count"]["flip"]) == (384, True)
  assert (by_task["dsprites_location"]["resize"], by_task["dsprites_location"]["flip"]) == (
      384, False)
  table = (tmp_path / "w" / "vtab.md").read_text().splitlines()
  rows = [line for line in table if line.startswith("| ")][1:]
  assert rows == [  # the TFDS version each task read (TFDS 4.9 has the benchmark's)
      "| Natural | dtd | 50.00 | 0.01 | 2500 | 3.0.1 |",
      "| Natural | svhn | 70.00 | 0.01 | 2500 | 3.1.0 |",
      "| **Natural mean** | 2 of 7 tasks | **60.00** | | | |",
      "| Specialized | eurosat | 90.00 | 0.01 | 2500 | 2.0.0 |",
      "| **Specialized mean** | 1 of 4 tasks | **90.00** | | | |",
      "| Structured | clevr_count | 30.00 | 0.01 | 2500 | 3.1.0 |",
      "| Structured | dsprites_location | 40.00 | 0.01 | 2500 | 2.0.0 |",
      "| **Structured mean** | 2 of 8 tasks | **35.00** | | | |",
      "| Custom | my_images | 80.00 | 0.01 | 2500 | (image directory) |",
      "| **Custom mean** | 1 task, in no VTAB group | **80.00** | | | |",
      "| **Mean** | 6 tasks, 1 custom included | **60.00** | | | |"]
  assert report["tasks"]["dtd"]["tfds_version"] == "3.0.1"
  assert report["tasks"]["dtd"]["reference_version"] == "3.*.*"


def test_the_table_marks_a_task_not_at_the_benchmarks_version(tmp_path):
  """TFDS 4.9 cannot build Pets 3.*.* (the reference's): with none prepared, the task
  reads 4.0.0 and vtab.json / vtab.md say so."""
  base = vtab.base_config()
  base.tfds_data_dir = str(tmp_path / "tfds")
  report = vtab.run_benchmark(base, ["oxford_iiit_pet"], checkpoint="ViT-B_16",
                              workdir=str(tmp_path / "w"),
                              train_fn=fake_training({"oxford_iiit_pet": 0.9}, []))
  pets = report["tasks"]["oxford_iiit_pet"]
  assert (pets["tfds_version"], pets["reference_version"]) == ("4.0.0", "3.*.*")
  assert "cannot build 3.*.*" in pets["version_note"]
  assert json.loads((tmp_path / "w" / "vtab.json").read_text())["tasks"]["oxford_iiit_pet"][
      "tfds_version"] == "4.0.0"
  assert "| Natural | oxford_iiit_pet | 90.00 | 0.01 | 2500 | 4.0.0 (benchmark: 3.*.*) |" in (
      tmp_path / "w" / "vtab.md").read_text()



def test_the_workdir_must_be_new_or_a_vtab_run(tmp_path):
  """The report files never land in a folder VTAB did not make (a run's workdir, $HOME)."""
  (tmp_path / "w").mkdir()
  (tmp_path / "w" / "vtab.md").write_text("my notes")
  run = lambda **kw: vtab.run_benchmark(vtab.base_config(), ["dtd"], checkpoint="ViT-B_16",
                                        workdir=str(tmp_path / "w"),
                                        train_fn=fake_training({"dtd": 0.5}, []), **kw)
  with pytest.raises(no_clobber.OutputExistsError, match="holds files it did not write"):
    run()
  assert (tmp_path / "w" / "vtab.md").read_text() == "my notes"
  run(overwrite=True)
  run()  # now its own output: a rerun resumes there


SWEEP = ((0.001, 0.01), (500, 2500))
VAL = {  # val200 accuracy per (task, lr, steps)
    ("dtd", 0.001, 500): 0.6, ("dtd", 0.001, 2500): 0.7, ("dtd", 0.01, 500): 0.5,
    ("dtd", 0.01, 2500): 0.65,
    ("clevr_count", 0.001, 500): 0.2, ("clevr_count", 0.001, 2500): 0.3,
    ("clevr_count", 0.01, 500): 0.9, ("clevr_count", 0.01, 2500): 0.8}


@pytest.mark.parametrize("select, expected", [
    ("task", {"dtd": (0.001, 2500), "clevr_count": (0.01, 500)}),
    ("mean", {"dtd": (0.01, 2500), "clevr_count": (0.01, 2500)}),  # means .4, .5, .7, .725
], ids=["task", "mean"])
def test_sweep_selects_on_val200(tmp_path, select, expected):
  accuracies = {(task, "val200", lr, steps): acc for (task, lr, steps), acc in VAL.items()}
  accuracies.update({"dtd": 0.55, "clevr_count": 0.85})
  calls = []
  report = vtab.run_benchmark(vtab.base_config(), ["dtd", "clevr_count"], checkpoint="ViT-B_16",
                              workdir=str(tmp_path), sweep=SWEEP, select=select,
                              train_fn=fake_training(accuracies, calls))
  sweeps = [c for c in calls if c["eval_split"] == "val200"]
  finals = [c for c in calls if c["eval_split"] == "test"]
  assert len(sweeps) == 8 and all(c["train_split"] == "train800" for c in sweeps)
  assert {(c["task"], c["base_lr"], c["total_steps"]) for c in sweeps} == set(VAL)
  assert {(c["total_steps"], c["warmup_steps"]) for c in sweeps} == {(500, 100), (2500, 500)}
  assert os.path.join(str(tmp_path), "dtd", "sweep", "lr0.001_steps500") in {
      c["workdir"] for c in sweeps}
  assert {c["task"]: (c["base_lr"], c["total_steps"]) for c in finals} == expected
  assert all(c["train_split"] == "train800val200" for c in finals)
  for task, (lr, steps) in expected.items():
    assert (report["tasks"][task]["base_lr"], report["tasks"][task]["total_steps"]) == (lr, steps)
    assert report["tasks"][task]["val200"][vtab.setting_name(0.001, 500)] == VAL[task, 0.001, 500]
  assert report["sweep"] == {"lrs": [0.001, 0.01], "steps": [500, 2500], "select": select}


def test_select_settings_ties_go_to_the_first():
  val = {"a": {"s1": 0.5, "s2": 0.5, "s3": 0.4}, "b": {"s1": 0.1, "s2": 0.3, "s3": 0.3}}
  assert vtab.select_settings(val, "task") == {"a": "s1", "b": "s2"}
  assert vtab.select_settings(val, "mean") == {"a": "s2", "b": "s2"}


def run_command(monkeypatch, argv):
  """vit_jax.vtab's main in-process, with its own flags (config_flags reads the
  --config.KEY overrides from sys.argv)."""
  monkeypatch.setattr(sys, "argv", ["vtab", *argv])
  flag_values = flags.FlagValues()
  command.define_flags(flag_values)
  flag_values(sys.argv)
  return command.main(["vtab"], flag_values)


def test_command_sweeps_on_val200_of_a_folder(folders, checkpoint, tmp_path, capsys,
                                              monkeypatch):
  """The real sweep: train800 -> val200 runs (200 examples), the best by val accuracy,
  then the final run; overrides reach every run."""
  workdir = tmp_path / "work"
  run_command(monkeypatch, [f"--checkpoint={checkpoint}", f"--workdir={workdir}",
                            f"--tasks={folders / 'beta'}", "--lr_sweep",
                            # the grid's settings are the runs' above (0.01 for 4 steps: the
                            # three tasks'; for 6: the rerun's): no train program of its own
                            "--sweep_lrs=0.01", "--sweep_steps=4,6",
                            *[f"--config.{k}={v}" for k, v in TINY.items() if k != "total_steps"]])
  val = {}
  for setting in ("lr0.01_steps4", "lr0.01_steps6"):
    final = read_json(workdir, "beta", "sweep", setting, "final_metrics.json")
    config = read_json(workdir, "beta", "sweep", setting, "config.json")
    assert (final["eval/examples"], config["train_split"], config["batch"]) == (
        200, "train800", 16)
    val[setting] = final["eval/accuracy"]
  best = max(val, key=val.get)
  report = read_json(workdir, "vtab.json")["tasks"]["beta"]
  assert report["val200"] == val
  assert vtab.setting_name(report["base_lr"], report["total_steps"]) == best
  config = read_json(workdir, "beta", "config.json")
  assert (config["base_lr"], config["total_steps"], config["train_split"]) == (
      report["base_lr"], report["total_steps"], "train800val200")
  assert f"| Custom | beta | {100 * report['top1']:.2f} |" in capsys.readouterr().out


USAGE = {  # argv -> the start of the UsageError's message
    ("--tasks=dtd,clevr_cont",): "unknown task 'clevr_cont' in --tasks: not a VTAB task, a "
    "group (natural, specialized, structured) or an image directory (one whose name has a "
    "comma must be renamed: --tasks splits at commas); tasks: caltech101, ",
    ("--config.dataset=cifar10",): "--config.dataset is set by each task's run: use --tasks",
    ("--lr_sweep", "--config.total_steps=3"): "--config.total_steps is swept with --lr_sweep: "
    "set the grid with --sweep_lrs and --sweep_steps",
    ("--lr_sweep", "--sweep_steps=0,10"): "--sweep_steps=0,10 must be positive integers",
    ("--sweep_lrs=0.1,0.3",): "--sweep_lrs need --lr_sweep",
}


def test_tasks_take_config_dataset_names_and_a_directory_once(folders, tmp_path):
  mine = folders / next(iter(FOLDERS))
  runs = vtab.resolve_tasks(["vtab/dtd", "dtd", str(mine), str(mine) + "/"])
  assert [(run.name, run.dataset) for run in runs] == [("dtd", "vtab/dtd"), (mine.name, str(mine))]
  write_image(tmp_path / "small" / "train" / "a" / "0.png")  # fails before any task runs
  write_image(tmp_path / "small" / "test" / "a" / "0.png")
  with pytest.raises(ValueError, match="VTAB-1k draws 800 train \\+ 200 validation images from "
                     f"{tmp_path / 'small' / 'train'}, which has 1"):
    vtab.resolve_tasks([str(mine), str(tmp_path / "small")])


@pytest.mark.parametrize("argv", USAGE, ids=lambda argv: argv[-1].split("=")[0])
def test_usage_mistakes_fail_before_any_run(monkeypatch, tmp_path, argv):
  with pytest.raises(app.UsageError) as raised:
    run_command(monkeypatch, ["--checkpoint=ViT-B_16", f"--workdir={tmp_path}", *argv])
  assert str(raised.value).startswith(USAGE[argv])
  assert not os.listdir(tmp_path)


def test_bad_config_override_is_one_line(monkeypatch, capsys):
  monkeypatch.setattr(sys, "argv", ["vtab", "--config.nope=3"])
  with pytest.raises(SystemExit) as raised:
    cli.define_or_exit(command.define_flags, flags.FlagValues())
  assert raised.value.code == 2
  assert capsys.readouterr().err == "error: bad flag or config override: no config key 'nope'\n"


def test_a_usage_error_is_one_line(tmp_path):
  """As run: a usage mistake is one line, exit 2 (--help: tests/base/test_cli.py); the command
  imports TensorFlow as it starts, and nothing of that is printed either."""
  env = dict(os.environ, JAX_PLATFORMS="cpu")
  done = subprocess.run([sys.executable, "-m", "vit_jax.vtab", "--checkpoint=ViT-B_16",
                         f"--workdir={tmp_path}", "--tasks=nope"], cwd=REPO, env=env, text=True,
                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=300,
                        check=False)
  assert done.returncode == 2
  assert done.stdout.startswith("error: unknown task 'nope' in --tasks") and done.stdout.endswith(
      "(--help shows the usage)\n") and done.stdout.count("\n") == 1


def test_a_gs_workdir_gets_the_report_and_a_rerun_reads_it_back(gcs):
  """--workdir=gs://...: the output claim, the per-task folders and the report files go
  to the bucket (the emulator), and a second run into it is accepted as the same kind."""
  workdir = f"gs://{gcs.bucket}/vtab"
  calls = []
  for _ in range(2):
    report = vtab.run_benchmark(vtab.base_config(), ["dtd"], checkpoint="ViT-B_16",
                                workdir=workdir, train_fn=fake_training({"dtd": 0.5}, calls))
  assert [call["workdir"] for call in calls] == [f"{workdir}/dtd"] * 2
  assert json.loads(storage.read_text(f"{workdir}/vtab.json")) == json.loads(json.dumps(report))
  assert "dtd" in storage.read_text(f"{workdir}/vtab.md")
