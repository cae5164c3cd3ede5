"""Preemption: SIGTERM checkpoints at a step boundary; after SIGKILL a rerun of the same
command resumes and ends with the parameters of an uninterrupted run."""

import os
import signal
import subprocess
import sys
import time

import numpy as np

from conftest import REPO

DEMO = ["--config=configs/demo.py", "--config.batch=32", "--config.progress_every=1",
        "--config.eval_every=1000", "--config.warmup_steps=2"]


def start_main(workdir, *overrides, log_path=None):
  """Starts the main job; its output goes to <workdir>.log (a pipe could fill and block)."""
  env = {**os.environ, "PYTHONPATH": str(REPO), "TF_CPP_MIN_LOG_LEVEL": "3"}
  log = open(log_path or f"{workdir}.log", "w")
  return subprocess.Popen([sys.executable, "-m", "vit_jax.main", *DEMO, f"--workdir={workdir}",
                           *overrides], cwd=REPO, env=env, stdout=log, stderr=log)


def finish(process, workdir, timeout=300):
  """Waits for the job; returns its exit code and its output."""
  process.wait(timeout=timeout)
  return process.returncode, open(f"{workdir}.log").read()


def wait_for(predicate, timeout=240):
  deadline = time.time() + timeout
  while time.time() < deadline:
    if predicate():
      return
    time.sleep(0.2)
  raise TimeoutError("condition not reached")


def checkpoint_steps(workdir):
  path = os.path.join(workdir, "checkpoints")
  return sorted(int(d) for d in os.listdir(path) if d.isdigit()) if os.path.isdir(path) else []


def trained_steps(workdir):
  path = os.path.join(workdir, "metrics.jsonl")
  return open(path).read().count('"train/loss"') if os.path.exists(path) else 0


def test_a_second_run_is_refused_and_sigterm_saves_the_current_step(tmp_path):
  workdir = str(tmp_path / "run")
  process = start_main(workdir, "--config.total_steps=100000", "--config.checkpoint_every=100000")
  wait_for(lambda: trained_steps(workdir) >= 3)
  # The same workdir from a second process, with another config: refused, nothing touched.
  config_before = open(os.path.join(workdir, "config.json")).read()
  second_run = start_main(workdir, "--config.base_lr=0.1", log_path=f"{workdir}.second.log")
  code, second = finish(second_run, f"{workdir}.second")
  assert code == 1
  assert second.strip().splitlines() == [
      line for line in second.splitlines() if line.startswith("error: ")]
  assert "is in use by another run" in second and f"pid {process.pid}," in second
  assert open(os.path.join(workdir, "config.json")).read() == config_before
  process.send_signal(signal.SIGTERM)
  code, stderr = finish(process, workdir)
  assert code == 0, stderr[-2000:]
  steps = checkpoint_steps(workdir)
  assert len(steps) == 1 and 3 <= steps[0] < 100000
  assert f"saved the checkpoint of step {steps[0]}" in stderr


def test_sigkill_then_rerun_equals_an_uninterrupted_run(tmp_path):
  common = ["--config.total_steps=40", "--config.checkpoint_every=4"]
  reference_dir, killed_dir = str(tmp_path / "reference"), str(tmp_path / "killed")
  reference = start_main(reference_dir, *common)
  killed = start_main(killed_dir, *common)
  wait_for(lambda: checkpoint_steps(killed_dir) or killed.poll() is not None)
  killed.kill()
  killed.wait()
  code, output = finish(reference, reference_dir)
  assert code == 0, output[-2000:]
  code, stderr = finish(start_main(killed_dir, *common), killed_dir)
  assert code == 0, stderr[-2000:]
  resumed_from = int(stderr.split("resumed from step ")[1].split()[0])
  assert 4 <= resumed_from < 40  # the kill landed mid-run, after a checkpoint
  reference_params = np.load(os.path.join(reference_dir, "params.npz"))
  resumed_params = np.load(os.path.join(killed_dir, "params.npz"))
  for key in reference_params.files:
    np.testing.assert_allclose(resumed_params[key], reference_params[key], rtol=1e-6,
                               atol=1e-7, err_msg=key)
