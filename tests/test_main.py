"""The command line: one `error:` line for mistakes, and a short real run."""

import json
import os
import subprocess
import sys

import pytest

from conftest import REPO
from helpers import demo_args, subprocess_env


def run_main(*args, devices=1, timeout=300):
  return subprocess.run([sys.executable, "-m", "vit_jax.main", *args], cwd=REPO,
                        env=subprocess_env(devices),
                        capture_output=True, text=True, timeout=timeout)


def error_lines(result):
  return [line for line in result.stderr.splitlines() if line.startswith("error:")]


def test_config_key_typo(tmp_path):
  result = run_main("--config=configs/demo.py", f"--workdir={tmp_path}", "--config.bacth=3")
  assert result.returncode == 2
  assert error_lines(result) == ["error: bad flag or config override: no config key 'bacth' Did "
                                 "you mean \"batch\" instead of \"bacth\"?"]
  assert "Traceback" not in result.stderr


def test_tensor_axis_must_divide_the_heads(tmp_path):
  result = run_main("--config=configs/demo.py", f"--workdir={tmp_path}",
                    "--config.mesh.data=1", "--config.mesh.tensor=8", devices=8)
  assert result.returncode == 1
  [line] = error_lines(result)
  assert "mesh tensor=8 does not divide the model's 4 heads" in line


def test_batch_not_divisible_by_devices(tmp_path):
  result = run_main("--config=configs/demo.py", f"--workdir={tmp_path}", "--config.batch=12",
                    devices=8)
  assert result.returncode == 1
  [line] = error_lines(result)
  assert "config.batch=12 is not divisible by the 8 data-parallel devices" in line
  assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("mesh", [[], ["--config.mesh.data=4", "--config.mesh.fsdp=2"],
                                  ["--config.mesh.data=2", "--config.mesh.tensor=4"]],
                         ids=["data8", "data4_fsdp2", "data2_tensor4"])
def test_short_demo_run_on_8_devices(tmp_path, mesh):
  # The shared demo run (helpers.DEMO_SETTINGS): data8 compiles what test_multiprocess's
  # 8-device run compiles.
  result = run_main(*demo_args(eval_every=6), f"--workdir={tmp_path}", *mesh, devices=8)
  assert result.returncode == 0, result.stderr[-2000:]
  assert "img/s/device" in result.stderr and "ETA" in result.stderr
  final = json.loads((tmp_path / "final_metrics.json").read_text())
  assert final["eval/examples"] == 300
  # The console: what a user needs, no library chatter, and a summary naming the outputs.
  for noise in ("checkpoint_manager", "Unable to initialize backend", "oneDNN", "Total:",
                "Hyperparameters"):
    assert noise not in result.stderr, noise
  assert len(result.stderr.splitlines()) < 20, result.stderr
  summary = result.stderr[result.stderr.index("done: trained steps 1-6 of 6"):]
  assert f"eval accuracy {final['eval/accuracy']:.4f}" in summary
  for path in ("params.npz", "metrics.jsonl", "checkpoints"):
    assert str(tmp_path / path) in summary
  assert f"tensorboard --logdir={tmp_path}" in summary


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
