"""The command line: one `error:` line for mistakes, and a short real run."""

import json
import os
import subprocess
import sys

import pytest

from conftest import REPO


def run_main(*args, devices=1, timeout=300):
  env = {**os.environ, "PYTHONPATH": str(REPO), "TF_CPP_MIN_LOG_LEVEL": "3",
         "XLA_FLAGS": f"--xla_force_host_platform_device_count={devices}"}
  return subprocess.run([sys.executable, "-m", "vit_jax.main", *args], cwd=REPO, env=env,
                        capture_output=True, text=True, timeout=timeout)


def error_lines(result):
  return [line for line in result.stderr.splitlines() if line.startswith("error:")]


def test_config_key_typo(tmp_path):
  result = run_main("--config=configs/demo.py", f"--workdir={tmp_path}", "--config.bacth=3")
  assert result.returncode == 2
  assert error_lines(result) == [
      "error: bad flag or config override: 'bacth' Did you mean \"batch\" instead of \"bacth\"?"]
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
  result = run_main("--config=configs/demo.py", f"--workdir={tmp_path}",
                    "--config.total_steps=4", "--config.batch=64", "--config.eval_every=4",
                    "--config.progress_every=2", *mesh, devices=8)
  assert result.returncode == 0, result.stderr[-2000:]
  assert "img/s/device" in result.stderr and "ETA" in result.stderr
  final = json.loads((tmp_path / "final_metrics.json").read_text())
  assert final["eval/examples"] == 300
