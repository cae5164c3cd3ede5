"""Preemption: SIGTERM checkpoints at a step boundary; after SIGKILL a rerun of the same
command resumes and ends with the parameters of an uninterrupted run."""

import os
import re
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from conftest import REPO
from helpers import demo_args, demo_config, read_metrics, subprocess_env
from vit_jax import train

# The shared demo run (helpers.DEMO_SETTINGS), logging every step, never evaluating.
DEMO = dict(progress_every=1, eval_every=1000)


def start_main(workdir, log_path=None, **settings):
  """Starts the main job; its output goes to <workdir>.log (a pipe could fill and block)."""
  log = open(log_path or f"{workdir}.log", "w")
  return subprocess.Popen([sys.executable, "-m", "vit_jax.main",
                           *demo_args(**{**DEMO, **settings}), f"--workdir={workdir}"],
                          cwd=REPO, env=subprocess_env(), stdout=log, stderr=log)


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


def press_ctrl_c(process):
  """Sends SIGINT and returns once the kernel has delivered it: two signals pending at the
  same time merge into one, so a second press must wait for the first to arrive."""
  process.send_signal(signal.SIGINT)
  pending_bit = 1 << (signal.SIGINT - 1)
  deadline = time.time() + 10
  while time.time() < deadline:
    with open(f"/proc/{process.pid}/status") as status:
      masks = [int(line.split()[1], 16) for line in status
               if line.startswith(("SigPnd:", "ShdPnd:"))]
    if not any(mask & pending_bit for mask in masks):
      return
    time.sleep(0.001)
  raise TimeoutError("SIGINT was not delivered within 10 s")


def checkpoint_steps(workdir):
  path = os.path.join(workdir, "checkpoints")
  return sorted(int(d) for d in os.listdir(path) if d.isdigit()) if os.path.isdir(path) else []


def trained_steps(workdir):
  return sum("train/loss" in row for row in read_metrics(workdir))


def test_a_second_run_is_refused_and_sigterm_saves_the_current_step(tmp_path):
  workdir = str(tmp_path / "run")
  process = start_main(workdir, total_steps=100000, checkpoint_every=100000)
  wait_for(lambda: trained_steps(workdir) >= 3)
  # The same workdir from a second process, with another config: refused, nothing touched.
  config_before = open(os.path.join(workdir, "config.json")).read()
  second_run = start_main(workdir, log_path=f"{workdir}.second.log", base_lr=0.1)
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


def test_ctrl_c_saves_the_current_step_and_a_second_one_aborts_at_once(tmp_path):
  workdir = str(tmp_path / "run")
  process = start_main(workdir, total_steps=100000, checkpoint_every=100000)
  wait_for(lambda: trained_steps(workdir) >= 3)
  press_ctrl_c(process)
  code, output = finish(process, workdir)
  assert code == 130, output[-2000:]
  steps = checkpoint_steps(workdir)
  assert len(steps) == 1 and 3 <= steps[0] < 100000
  assert "Traceback" not in output and "KeyboardInterrupt" not in output
  lines = output.strip().splitlines()
  assert lines[-1] == (f"interrupted: saved the checkpoint of step {steps[0]} in "
                       f"{workdir}/checkpoints; rerun the same command to resume")
  assert sum(line.startswith("Ctrl-C: saving a checkpoint") for line in lines) == 1

  # A resume that cannot restore (another model size): one line, nothing else, nothing lost.
  code, output = finish(start_main(workdir, log_path=f"{workdir}.mismatch.log",
                                   **{"model.hidden_size": 32}), f"{workdir}.mismatch")
  assert code == 1 and len(output.splitlines()) == 1, output[-3000:]
  assert output.startswith(f"error: cannot resume: no checkpoint in {workdir}/checkpoints "
                           f"(steps {steps[0]}) can be used (step {steps[0]}: Requested shape")
  assert "strict=False" not in output and "padding" not in output
  assert checkpoint_steps(workdir) == steps

  process = start_main(workdir, total_steps=100000, checkpoint_every=100000)
  wait_for(lambda: trained_steps(workdir) >= steps[0] + 2)  # resumed
  press_ctrl_c(process)
  press_ctrl_c(process)  # a second press, before the first one's save can end
  started = time.time()
  code, output = finish(process, workdir, timeout=30)
  assert code == 130 and time.time() - started < 10, output[-2000:]
  lines = output.strip().splitlines()
  assert lines[-2].startswith("Ctrl-C: saving a checkpoint"), output[-2000:]
  assert lines[-1].startswith("second Ctrl-C: aborted at once"), output[-2000:]
  assert set(steps) <= set(checkpoint_steps(workdir))  # nothing lost


def test_sigkill_then_rerun_equals_an_uninterrupted_run(tmp_path):
  common = dict(total_steps=40, checkpoint_every=4)
  reference_dir, killed_dir = str(tmp_path / "reference"), str(tmp_path / "killed")
  killed = start_main(killed_dir, **common)
  wait_for(lambda: checkpoint_steps(killed_dir) or killed.poll() is not None)
  killed.kill()
  killed.wait()
  # The uninterrupted run, in this process: the same job and programs as the command
  # (compiled by now, so they come from the persistent cache).
  train.train_and_evaluate(demo_config(**DEMO, **common), reference_dir)
  code, stderr = finish(start_main(killed_dir, **common), killed_dir)
  assert code == 0, stderr[-2000:]
  resumed_from = int(stderr.split("resumed from step ")[1].split()[0])
  assert 4 <= resumed_from < 40  # the kill landed mid-run, after a checkpoint
  reference_params = np.load(os.path.join(reference_dir, "params.npz"))
  resumed_params = np.load(os.path.join(killed_dir, "params.npz"))
  for key in reference_params.files:
    np.testing.assert_allclose(resumed_params[key], reference_params[key], rtol=1e-6,
                               atol=1e-7, err_msg=key)


def run_in_tiny_filesystem(script, size="5m"):
  """Runs `script` (sh) with a fresh tmpfs of `size` mounted at /mnt (a private mount
  namespace: works unprivileged where user namespaces are enabled)."""
  unshare = shutil.which("unshare")
  if unshare is None or subprocess.run(
      [unshare, "--user", "--map-root-user", "--mount", "true"], capture_output=True).returncode:
    pytest.skip("cannot create a private mount namespace (unshare) to fill a disk")
  return subprocess.run([unshare, "--user", "--map-root-user", "--mount", "sh", "-c",
                         f"mount -t tmpfs -o size={size} tmpfs /mnt && {script}"],
                        cwd=REPO, env=subprocess_env(), capture_output=True, text=True, timeout=600)


def test_a_full_disk_keeps_the_last_checkpoint_and_says_so_in_one_line():
  main = " ".join([sys.executable, "-m", "vit_jax.main", "--workdir=/mnt/run",
                   *demo_args(**DEMO, total_steps=8, checkpoint_every=2)])
  result = run_in_tiny_filesystem(
      f"{main} 2>/mnt/first.log; echo \"== first exit $?\"; cat /mnt/first.log; "
      f"echo == checkpoints; ls /mnt/run/checkpoints; echo == second; {main} 2>&1; "
      "echo \"== second exit $?\"")
  out = result.stdout
  first_exit, rest = out.split("== first exit ", 1)
  first_run, rest = rest.split("== checkpoints", 1)
  checkpoints, second_run = rest.split("== second", 1)
  assert first_exit == "" and first_run.startswith("1\n"), out[-3000:]
  assert "Traceback" not in out
  [error] = [line for line in first_run.splitlines() if line.startswith("error: ")]
  match = re.fullmatch(r"error: disk full: no room for the checkpoint of step (\d+) in "
                       r"/mnt/run/checkpoints \(needs about .* MiB free\); .* rerun the same "
                       r"command to resume from step (\d+)", error)
  assert match, error
  refused, last = int(match.group(1)), int(match.group(2))
  assert 2 <= last == refused - 2  # the saves before the refused one all completed
  # ... and nothing half-written lies under a step name.
  assert checkpoints.split() == [str(s) for s in range(max(2, last - 2), last + 1, 2)]
  assert f"resumed from step {last}" in second_run and second_run.endswith("exit 1\n")
