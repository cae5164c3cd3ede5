"""The command line: one `error:` line for mistakes, and a short real run on each mesh."""

import json
import os
import subprocess
import sys

import pytest

from conftest import REPO
from helpers import (assert_params_close, demo_args, demo_config, load_params,
                     one_process_command, split_runs, subprocess_env)
from vit_jax import train

# The shared demo run (helpers.DEMO_SETTINGS), evaluated and saved once, at its end.
AT_THE_END = dict(eval_every=6, checkpoint_every=6)
MESHES = {"data8": [], "data4_fsdp2": ["--config.mesh.data=4", "--config.mesh.fsdp=2"],
          "data2_tensor4": ["--config.mesh.data=2", "--config.mesh.tensor=4"]}
MISTAKES_ON_8_DEVICES = {"tensor8": ["--config.mesh.data=1", "--config.mesh.tensor=8"],
                         "batch12": ["--config.batch=12"]}


def run_main(*args, timeout=300):
  return subprocess.run([sys.executable, "-m", "vit_jax.main", *args], cwd=REPO,
                        env=subprocess_env(devices=1), capture_output=True, text=True,
                        timeout=timeout)


def error_lines(result):
  return [line for line in result.stderr.splitlines() if line.startswith("error:")]


def test_config_key_typo(tmp_path):
  result = run_main("--config=configs/demo.py", f"--workdir={tmp_path}", "--config.bacth=3")
  assert result.returncode == 2
  assert error_lines(result) == ["error: bad flag or config override: no config key 'bacth' Did "
                                 "you mean \"batch\" instead of \"bacth\"?"]
  assert "Traceback" not in result.stderr


@pytest.fixture(name="runs_on_8_devices", scope="module")
def fixture_runs_on_8_devices(tmp_path_factory):
  """The command's runs that need 8 devices, one after another in one process (each
  process start costs seconds; helpers.run_in_one_process): the short demo run on each
  mesh, the first also showing what the process printed while it started, then two
  mistakes. name -> (exit code, what the run printed, its workdir)."""
  root = tmp_path_factory.mktemp("eight_devices")
  runs = {**{name: [*demo_args(**AT_THE_END), *mesh] for name, mesh in MESHES.items()},
          **{name: ["--config=configs/demo.py", *mistake]
             for name, mistake in MISTAKES_ON_8_DEVICES.items()}}
  workdirs = {name: root / name for name in runs}
  workdirs["batch12"].mkdir()  # an existing, empty workdir: a refused run adds nothing
  done = subprocess.run(one_process_command("vit_jax.main", [
      [*args, f"--workdir={workdirs[name]}"] for name, args in runs.items()]), cwd=REPO,
                        env=subprocess_env(8), capture_output=True, text=True, timeout=600)
  ended = split_runs(done.stderr)
  assert done.returncode == 0 and len(ended) == len(runs), done.stderr[-3000:]
  return {name: (code, printed, workdirs[name])
          for name, (code, _, printed) in zip(runs, ended)}


@pytest.fixture(name="one_device_params", scope="module")
def fixture_one_device_params(tmp_path_factory):
  """The parameters of the same demo run on one device (this process)."""
  workdir = str(tmp_path_factory.mktemp("one_device"))
  train.train_and_evaluate(demo_config(**AT_THE_END), workdir)
  return load_params(workdir)


def mistake_line(runs_on_8_devices, name):
  code, printed, _ = runs_on_8_devices[name]
  assert code == 1, printed[-2000:]
  [line] = [line for line in printed.splitlines() if line.startswith("error:")]
  return line


def test_tensor_axis_must_divide_the_heads(runs_on_8_devices):
  line = mistake_line(runs_on_8_devices, "tensor8")
  assert "mesh tensor=8 does not divide the model's 4 heads" in line


def test_batch_not_divisible_by_devices(runs_on_8_devices):
  line = mistake_line(runs_on_8_devices, "batch12")
  assert "config.batch=12 is not divisible by the 8 data-parallel devices" in line
  assert os.listdir(runs_on_8_devices["batch12"][2]) == []


@pytest.mark.parametrize("mesh", MESHES)
def test_short_demo_run_on_8_devices(runs_on_8_devices, one_device_params, mesh):
  code, stderr, workdir = runs_on_8_devices[mesh]
  assert code == 0, stderr[-2000:]
  assert "img/s/device" in stderr and "ETA" in stderr
  final = json.loads((workdir / "final_metrics.json").read_text())
  assert final["eval/examples"] == 300
  # The console: what a user needs, no library chatter, and a summary naming the outputs.
  for noise in ("checkpoint_manager", "Unable to initialize backend", "oneDNN", "Total:",
                "Hyperparameters"):
    assert noise not in stderr, noise
  assert len(stderr.splitlines()) < 20, stderr
  summary = stderr[stderr.index("done: trained steps 1-6 of 6"):]
  assert f"eval accuracy {final['eval/accuracy']:.4f}" in summary
  for path in ("params.npz", "metrics.jsonl", "checkpoints"):
    assert str(workdir / path) in summary
  assert f"tensorboard --logdir={workdir}" in summary
  # The mesh trains what one device trains (two processes of 4 devices: test_multiprocess).
  assert_params_close(load_params(workdir), one_device_params)


@pytest.mark.parametrize("args, message", [
    (["--config.total_steps=-5"], "error: config.total_steps=-5 must be >= 1"),
    (["--config.pretrained=/no/such.npz"], "error: config.pretrained=/no/such.npz"),
], ids=["negative_steps", "missing_pretrained"])
def test_refused_runs_write_nothing_and_print_one_line(tmp_path, args, message):
  workdir = tmp_path / "run"
  result = run_main("--config=configs/demo.py", f"--workdir={workdir}", *args)
  assert result.returncode == 1
  assert result.stderr.strip().startswith(message) and len(result.stderr.splitlines()) == 1
  assert not workdir.exists()


@pytest.mark.parametrize("args, message", [
    (["--config=configs/demo.py:digits", "--config.dataset=/data/pets"],
     "error: --config.dataset=/data/pets would keep the splits, steps, crop and eval sets "
     "configs/demo.py chose for its own dataset; pass the dataset after the colon instead: "
     "--config=configs/demo.py:/data/pets (--help shows the usage)"),
    (["--config=configs/pretrain.py:ViT-B_16"],
     "error: cannot load --config: configs/pretrain.py takes MODEL,DATASET (e.g. "
     "--config=configs/pretrain.py:ViT-B_16,imagenet21k), got 'ViT-B_16'; MODEL is one of "
     "ViT-Ti_16, "),
], ids=["dataset_override", "pretrain_without_dataset"])
def test_config_arguments_are_one_usage_line(tmp_path, args, message):
  result = run_main(*args, f"--workdir={tmp_path / 'run'}")
  assert result.returncode == 2 and len(result.stderr.splitlines()) == 1, result.stderr
  assert result.stderr.startswith(message)
  assert not (tmp_path / "run").exists()


def test_a_file_as_workdir_is_one_line(tmp_path):
  (tmp_path / "file").write_text("data")
  result = run_main("--config=configs/demo.py", f"--workdir={tmp_path / 'file'}")
  assert result.returncode == 1
  assert error_lines(result) == [f"error: --workdir={tmp_path / 'file'} is a file, not a "
                                 "directory: pass a directory path (it is created if missing)"]
  assert (tmp_path / "file").read_text() == "data"
