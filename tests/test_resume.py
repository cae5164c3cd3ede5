"""Preemption: SIGTERM checkpoints at a step boundary; after SIGKILL a rerun of the same
command resumes and ends with the parameters of an uninterrupted run.

The runs that receive the signals (and the full disk's) are real processes; the other runs
of the same command (refused, resumed) run in this process through the command's own
parsing and endings (helpers.run_in_process): a process start costs seconds."""

import glob
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import time

import numpy as np
import pytest

import fork_server

from conftest import REPO
from helpers import (demo_args, demo_config, read_metrics, run_in_process, sigterm_at_step,
                     split_runs, subprocess_env, wait_for)
from vit_jax import main
from vit_jax.data import device_batches
from vit_jax.training import loop
from vit_jax.training.runs import preemption

pytestmark = pytest.mark.long  # real-process runs: start first (conftest)

# The shared demo run (helpers.DEMO_SETTINGS), logging every step, never evaluating.
DEMO = dict(progress_every=1, eval_every=1000)
# A run that lasts until a signal stops it; the same program in every such test.
UNTIL_STOPPED = dict(total_steps=100000, checkpoint_every=100000)
# A run that a SIGKILL or a full disk stops partway, and the same run uninterrupted.
SHORT = dict(total_steps=40)


def start_main(workdir, **settings):
  """Starts the main job (a real process: tests/fork_server.py); its output goes to
  <workdir>.log (a pipe could fill and block)."""
  return fork_server.start(["vit_jax.main", *demo_args(**{**DEMO, **settings}),
                            f"--workdir={workdir}"], subprocess_env(), REPO, f"{workdir}.log")


def finish(process, workdir, timeout=300):
  """Waits for the job; returns its exit code and its output."""
  process.wait(timeout=timeout)
  return process.returncode, open(f"{workdir}.log").read()


def run_here(workdir, **settings):
  """The same command in this process: its exit code and what it printed."""
  done = run_in_process(main, *demo_args(**{**DEMO, **settings}), f"--workdir={workdir}")
  return done.returncode, done.stdout + done.stderr


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


def press_again_while_saving(process, workdir):
  """A second Ctrl-C that lands while the first one's save is being written, however fast
  the machine: the job is stopped (SIGSTOP) once orbax's background writer has reached the
  array metadata (the save call has returned by then; the commit is still to come), and
  the press arrives as it continues."""
  half_written = os.path.join(workdir, "checkpoints", "*.orbax-checkpoint-tmp*", "*",
                              "array_metadatas")
  deadline = time.monotonic() + 60
  while not glob.glob(half_written):
    assert process.poll() is None and time.monotonic() < deadline, "no save began in 60 s"
    time.sleep(0.0002)
  os.kill(process.pid, signal.SIGSTOP)
  try:
    assert glob.glob(half_written), "the save ended before the job could be stopped"
    time.sleep(preemption.SAME_PRESS_S + 0.05)  # a second press, not the first one forwarded
    process.send_signal(signal.SIGINT)
  finally:
    os.kill(process.pid, signal.SIGCONT)


def checkpoint_steps(workdir):
  path = os.path.join(workdir, "checkpoints")
  return sorted(int(d) for d in os.listdir(path) if d.isdigit()) if os.path.isdir(path) else []


def trained_steps(workdir):
  return sum("train/loss" in row for row in read_metrics(workdir))


def test_a_second_run_is_refused_and_sigterm_saves_the_current_step(tmp_path):
  workdir = str(tmp_path / "run")
  process = start_main(workdir, **UNTIL_STOPPED)
  wait_for(lambda: trained_steps(workdir) >= 3, process)
  # The same workdir from a second process (this one), with another config: refused,
  # nothing touched.
  config_before = open(os.path.join(workdir, "config.json")).read()
  code, second = run_here(workdir, base_lr=0.1)
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


def test_ctrl_c_saves_the_current_step_and_a_second_one_aborts_at_once(tmp_path, caplog):
  workdir = str(tmp_path / "run")
  process = start_main(workdir, **UNTIL_STOPPED)
  wait_for(lambda: trained_steps(workdir) >= 3, process)
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

  # A resume that cannot restore (another model size): one line, nothing else (no library
  # warning either: a command shows those), nothing lost.
  with caplog.at_level(logging.WARNING):
    code, output = run_here(workdir, **{"model.hidden_size": 32})
  assert code == 1 and len(output.splitlines()) == 1, output[-3000:]
  assert not caplog.records, caplog.text
  assert output.startswith(f"error: cannot resume: no checkpoint in {workdir}/checkpoints "
                           f"(steps {steps[0]}) can be used (step {steps[0]}: Requested shape")
  assert "strict=False" not in output and "padding" not in output
  changed = output.rstrip().split("; changed since the run started (config.json): ")[1]
  assert "model.hidden_size" in changed.split(", ")  # with the cadence this run changed
  assert checkpoint_steps(workdir) == steps

  process = start_main(workdir, **UNTIL_STOPPED)
  wait_for(lambda: trained_steps(workdir) >= steps[0] + 2, process)  # resumed
  press_ctrl_c(process)
  press_again_while_saving(process, workdir)
  started = time.time()
  code, output = finish(process, workdir, timeout=30)
  assert code == 130 and time.time() - started < 10, output[-2000:]
  lines = output.strip().splitlines()
  assert lines[-1].startswith("second Ctrl-C: aborted at once"), output[-2000:]
  assert sum(line.startswith("Ctrl-C: saving a checkpoint") for line in lines) == 1, output[-2000:]
  assert "interrupted: saved" not in output
  assert set(steps) <= set(checkpoint_steps(workdir))  # nothing lost


@pytest.mark.parametrize("loader", ["tf", "grain"])
def test_sigkill_then_rerun_equals_an_uninterrupted_run(tmp_path, loader):
  common = dict(**SHORT, checkpoint_every=4, loader=loader)
  reference_dir, killed_dir = str(tmp_path / "reference"), str(tmp_path / "killed")
  killed = start_main(killed_dir, **common)
  wait_for(lambda: checkpoint_steps(killed_dir), killed)
  killed.kill()
  killed.wait()
  # The uninterrupted run, in this process: the same job and programs as the command
  # (compiled by now, so they come from the persistent cache), saved only at its end.
  loop.train_and_evaluate(demo_config(**DEMO, **SHORT, checkpoint_every=SHORT["total_steps"],
                                       loader=loader), reference_dir)
  code, stderr = run_here(killed_dir, **common)  # the rerun, after a dead owner
  assert code == 0, stderr[-2000:]
  resumed_from = int(stderr.split("resumed from step ")[1].split()[0])
  assert 4 <= resumed_from < 40  # the kill landed mid-run, after a checkpoint
  reference_params = np.load(os.path.join(reference_dir, "params.npz"))
  resumed_params = np.load(os.path.join(killed_dir, "params.npz"))
  for key in reference_params.files:
    np.testing.assert_allclose(resumed_params[key], reference_params[key], rtol=1e-6,
                               atol=1e-7, err_msg=key)


def start_in_private_mount(output, runs, size_or_folder):
  """`runs` of the main job one after another in one process (helpers.run_in_one_process),
  with a fresh tmpfs of that size, or the folder, mounted at /mnt in a private mount
  namespace (works unprivileged where user namespaces are enabled): a child of the fork
  server (tests/private_tmpfs.py), so the process start imports no TensorFlow. Its output
  goes to the file `output`."""
  unshare = shutil.which("unshare")
  if unshare is None or subprocess.run(
      [unshare, "--user", "--map-root-user", "--mount", "true"], capture_output=True).returncode:
    pytest.skip("cannot create a private mount namespace (unshare) to fill a disk")
  return fork_server.start(["private_tmpfs", size_or_folder, "vit_jax.main", json.dumps(runs)],
                           subprocess_env(), REPO / "tests", output)


def run_in_tiny_filesystem(workdir, runs, size="5m"):
  """start_in_private_mount with a tmpfs of `size`, to its end. Its output."""
  start_in_private_mount(f"{workdir}.log", runs, size).wait(timeout=600)
  return open(f"{workdir}.log").read()


def turn_read_only(pid, stage):
  """/mnt of the mount namespace of `pid` read-only, as a disk that the kernel remounts
  read-only after an error: a mount with files open for writing cannot be made read-only
  (EBUSY), so a read-only bind of it, made on the empty folder `stage`, is moved over it;
  what the process opens from now on is refused with EROFS."""
  stage.mkdir()
  subprocess.run(["nsenter", f"--target={pid}", "--user", "--mount", "--preserve-credentials",
                  "sh", "-ec", f"mount --bind /mnt {stage}; mount -o remount,bind,ro {stage}; "
                  f"mount --move {stage} /mnt"], check=True)


def test_a_full_disk_keeps_the_last_checkpoint_and_says_so_in_one_line(tmp_path):
  # The run and its rerun in one process: the private mount lives only as long as it.
  run = [*demo_args(**DEMO, **SHORT, checkpoint_every=2), "--workdir=/mnt/run"]
  out = run_in_tiny_filesystem(tmp_path / "run", [run, run])
  assert "Traceback" not in out, out[-3000:]
  runs = split_runs(out)
  assert len(runs) == 2, out[-3000:]
  (first_code, checkpoints, first_run), (second_code, _, second_run) = runs
  assert first_code == 1, out[-3000:]
  [error] = [line for line in first_run.splitlines() if line.startswith("error: ")]
  match = re.fullmatch(r"error: disk full: no room for the checkpoint of step (\d+) in "
                       r"/mnt/run/checkpoints \(needs about .* MiB free\); .* rerun the same "
                       r"command to resume from step (\d+)", error)
  assert match, error
  refused, last = int(match.group(1)), int(match.group(2))
  assert 2 <= last == refused - 2  # the saves before the refused one all completed
  # ... and nothing half-written lies under a step name.
  assert checkpoints == [str(s) for s in range(max(2, last - 2), last + 1, 2)]
  assert f"resumed from step {last}" in second_run and second_code == 1, second_run[-3000:]


def test_a_workdir_turned_read_only_mid_run_is_one_line_and_a_rerun_resumes(tmp_path,
                                                                            monkeypatch):
  disk, settings = tmp_path / "disk", {**UNTIL_STOPPED, "checkpoint_every": 2}
  disk.mkdir()
  run = [*demo_args(**DEMO, **settings), "--workdir=/mnt/run"]
  process = start_in_private_mount(tmp_path / "run.log", [run], str(disk))
  wait_for(lambda: checkpoint_steps(disk / "run") or process.poll() is not None)
  turn_read_only(process.pid, tmp_path / "stage")
  process.wait(timeout=300)
  [(code, _, out)] = split_runs(open(tmp_path / "run.log").read())
  assert code == 1 and "Traceback" not in out, out[-3000:]
  match = re.fullmatch(  # the run's last words, after its progress lines
      r"error: --workdir=/mnt/run stopped taking writes mid-run \(writing /mnt/run/\S+: "
      r"Read-only file system\): make it writable again \(remount its disk read-write, or "
      r"restore its permissions\), then rerun the same command to resume from the intact "
      r"checkpoint of step (\d+)", out.splitlines()[-1])
  assert match, out[-3000:]
  last = int(match.group(1))
  assert last == checkpoint_steps(disk / "run")[-1]
  # Writable again (the folder itself never was read-only): the same command resumes; a
  # SIGTERM before its second step ends it there.
  monkeypatch.setattr(device_batches, "prefetch_to_device", sigterm_at_step(2))
  code, out = run_here(disk / "run", **settings)
  assert code == 0 and f"resumed from step {last}" in out, out[-3000:]
  assert checkpoint_steps(disk / "run")[-1] == last + 2
