"""The main job with --workdir=gs://... against a real Cloud Storage emulator (the `gcs`
fixture): the same results as a local run, resume after SIGKILL, one run per workdir,
nothing rewritten by a finished rerun, two processes on one workdir, a store that goes
away mid-run and SIGTERM. Runs are shared between assertions to keep the module short;
runs that are not about signals or the process's end run in this process."""

import io
import os
import signal
import threading
import time

import numpy as np
import pytest

import fork_server
import gcs_emulator
import helpers
from conftest import REPO
from helpers import read_metrics, run_in_process, wait_for
from vit_jax import main
from vit_jax.base import storage, url_clients
from vit_jax.data import device_batches

pytestmark = pytest.mark.long

# Eight steps: the program of the other tests' demo runs resumed to step 8 (test_train,
# test_multiprocess), compiled once for the suite; four checkpoints, two of them kept.
ARGS = helpers.demo_args(total_steps=8, checkpoint_every=2, eval_every=1000)
LONG_RUN = ["--config.total_steps=100000", "--config.checkpoint_every=8"]
TIMINGS = ("train/img_per_sec", "train/img_per_sec_per_device")


def start(workdir, *extra, tag="run", args=ARGS, devices=1, env=None):
  """The main job on `workdir` (a real process: tests/fork_server.py), its output in
  <tmp>/<tag>.log (see output())."""
  return fork_server.start(["vit_jax.main", *args, f"--workdir={workdir}", *extra],
                           helpers.subprocess_env(devices, **(env or {})), REPO,
                           os.path.join(os.environ["GCS_TEST_LOGS"], f"{tag}.log"))


def run_here(workdir):
  """The same command in this process (helpers.run_in_process)."""
  return run_in_process(main, *ARGS, f"--workdir={workdir}")


def output(tag):
  with open(os.path.join(os.environ["GCS_TEST_LOGS"], f"{tag}.log")) as f:
    return f.read()


def finish(process, tag, timeout=400):
  process.wait(timeout=timeout)
  return process.returncode, output(tag)


def params(workdir):
  with np.load(io.BytesIO(storage.read_bytes(storage.join(workdir, "params.npz")))) as f:
    return {k: f[k] for k in f.files}


def checkpoint_steps(workdir):
  """Steps whose checkpoint is complete (orbax's commit marker on object stores)."""
  folder = storage.join(workdir, "checkpoints")
  return sorted(int(name) for name in storage.listdir(folder) if name.isdigit() and
                storage.exists(storage.join(folder, name, "commit_success.txt")))


def snapshot(workdir):
  """Every object under a gs:// workdir with its generation: any rewrite changes it."""
  filesystem, key = url_clients.url_filesystem(workdir)
  filesystem.invalidate_cache()
  return {path: info.get("generation") for path, info in
          filesystem.find(key, detail=True).items()}


def layout(names):
  """A workdir's top-level names, event files reduced to their kind."""
  return sorted({"events.out.tfevents" if n.startswith("events.out.tfevents") else n
                 for n in names})


@pytest.fixture(scope="module")
def logs(tmp_path_factory):
  """Where the jobs' outputs go (and the local run's workdir)."""
  folder = tmp_path_factory.mktemp("logs")
  os.environ["GCS_TEST_LOGS"] = str(folder)
  yield folder
  del os.environ["GCS_TEST_LOGS"]


@pytest.fixture(scope="module", autouse=True)
def cut_off(gcs, logs):
  """A long run whose link to the store is cut once its first checkpoint is complete,
  started before the module's first test: its clients then retry for about 35 s while
  the other tests run (test_a_store_that_goes_away... checks how it ended)."""
  link, workdir = gcs_emulator.Link(gcs), f"gs://{gcs.bucket}/outage"
  run = start(workdir, *LONG_RUN, tag="outage", env=link.env)

  def cut_after_the_first_checkpoint():
    try:
      while run.poll() is None and not checkpoint_steps(workdir):
        time.sleep(0.3)
    finally:
      link.cut()

  cutter = threading.Thread(target=cut_after_the_first_checkpoint, daemon=True)
  cutter.start()
  yield workdir, run, cutter
  link.cut()
  if run.poll() is None:
    run.kill()
    run.wait()


@pytest.fixture(scope="module")
def reference(gcs, logs):
  """The config run on a local workdir, then on a gs:// one, both in this process (one
  after the other: the second loads the first's compiled programs; the command on gs://
  runs as a real process in the SIGKILL test)."""
  local, remote = str(logs / "local"), f"gs://{gcs.bucket}/run"
  for workdir in (local, remote):
    done = run_here(workdir)
    assert done.returncode == 0, done.stderr[-3000:]
  return local, remote


def test_a_gs_run_matches_a_local_run_and_a_finished_rerun_writes_nothing(reference):
  local, remote = reference
  assert layout(storage.listdir(remote)) == layout(os.listdir(local))
  assert not {"run.lock", "metrics.parts"} & set(storage.listdir(remote))
  assert checkpoint_steps(remote) == [6, 8]  # retention: the last two of four
  assert sorted(int(n) for n in os.listdir(os.path.join(local, "checkpoints"))) == [6, 8]
  ours, theirs = params(remote), params(local)
  assert ours.keys() == theirs.keys()
  for key in theirs:
    np.testing.assert_array_equal(ours[key], theirs[key], err_msg=key)
  strip = lambda rows: [{k: v for k, v in r.items() if k not in TIMINGS} for r in rows]
  assert strip(read_metrics(remote)) == strip(read_metrics(local))
  for name in ("config.json", "final_metrics.json", "parameters.txt"):
    assert (storage.read_text(storage.join(remote, name))
            == storage.read_text(os.path.join(local, name))), name

  before = snapshot(remote)
  rerun = run_here(remote)
  assert rerun.returncode == 0 and "already finished at step 8" in rerun.stderr, rerun.stderr
  assert snapshot(remote) == before


def test_sigkill_then_rerun_resumes_exactly_and_a_live_run_is_not_shared(gcs, reference):
  """Also: the newest checkpoint, damaged after the kill, is set aside on the bucket and
  the one before it used, still ending with the uninterrupted run's parameters."""
  workdir = f"gs://{gcs.bucket}/killed"
  # Saving every step (which changes no parameter): once two checkpoints are complete,
  # six more steps and saves keep it mid-run while the test stops it.
  run = start(workdir, "--config.checkpoint_every=1", tag="killed")
  wait_for(lambda: len(checkpoint_steps(workdir)) >= 2, run)
  run.send_signal(signal.SIGSTOP)  # keep the holder alive (and mid-run) meanwhile
  try:
    second = run_here(workdir)
  finally:
    run.send_signal(signal.SIGKILL)
    run.wait()
  log = second.stderr
  errors = [line for line in log.splitlines() if line.startswith("error: ")]
  assert second.returncode == 1 and errors == log.strip().splitlines()[-1:], log[-2000:]
  assert "is in use by another run" in errors[0] and f"pid {run.pid}," in errors[0]

  *_, usable, damaged = checkpoint_steps(workdir)
  storage.write_atomic(
      storage.join(workdir, "checkpoints", str(damaged), "default", "manifest.ocdbt"), b"garbage")
  resumed = run_here(workdir)  # the rerun of the killed command (a process's end is not
  code, log = resumed.returncode, resumed.stderr  # what it is about): here
  assert code == 0, log[-3000:]
  assert f"checkpoint {damaged} cannot be used" in log and damaged < 8
  assert f"resumed from step {usable} " in log
  damaged_folder = storage.join(workdir, "damaged_checkpoints")
  assert [name.split("-")[0] for name in storage.listdir(damaged_folder)] == [str(damaged)]
  assert [r["step"] for r in read_metrics(workdir) if "train/loss" in r] == list(range(2, 9, 2))
  expected = params(reference[0])
  resumed = params(workdir)
  for key in expected:
    np.testing.assert_allclose(resumed[key], expected[key], rtol=1e-6, atol=1e-7, err_msg=key)


def test_two_processes_with_four_devices_share_one_gs_workdir(gcs, logs):
  """The shared demo run, as test_multiprocess runs it (the same compiled programs)."""
  workdir, port = f"gs://{gcs.bucket}/pod", helpers.free_port()
  workers = [start(workdir, f"--coordinator_address=127.0.0.1:{port}", "--num_processes=2",
                   f"--process_id={i}", tag=f"pod{i}", args=helpers.demo_args(eval_every=6),
                   devices=4) for i in range(2)]
  results = [finish(worker, f"pod{i}") for i, worker in enumerate(workers)]
  assert [code for code, _ in results] == [0, 0], results[0][1][-3000:] + results[1][1][-3000:]
  assert checkpoint_steps(workdir) == [3, 6]
  assert [r["step"] for r in read_metrics(workdir) if "train/loss" in r] == [2, 4, 6]
  assert "run.lock" not in storage.listdir(workdir) and "params.npz" in storage.listdir(workdir)


def test_a_store_that_goes_away_fails_in_one_line_then_sigterm_saves_on_the_bucket(
    cut_off, monkeypatch):
  """The run cut off from the store mid-run (the `cut_off` fixture): one line, no
  traceback, and its rerun resumes from the last complete checkpoint; SIGTERM then saves
  the step that run reached on the bucket (the rerun in this process, a real SIGTERM
  before its third step: helpers.sigterm_at_step)."""
  workdir, run, cutter = cut_off
  cutter.join(timeout=240)
  assert not cutter.is_alive(), "no checkpoint in 4 minutes"
  code, log = finish(run, "outage", timeout=300)
  lines = log.strip().splitlines()
  assert code == 1 and lines[-1].startswith("error: lost the connection to gs://"), log[-3000:]
  assert "Traceback" not in log

  complete = checkpoint_steps(workdir)
  monkeypatch.setattr(device_batches, "prefetch_to_device", helpers.sigterm_at_step(3))
  rerun = run_in_process(main, *ARGS, *LONG_RUN, f"--workdir={workdir}")
  code, log = rerun.returncode, rerun.stderr
  assert f"resumed from step {complete[-1]} " in log, log[-2000:]
  saved = checkpoint_steps(workdir)[-1]
  assert code == 0 and f"saved the checkpoint of step {saved} in gs://" in log, log[-2000:]
  assert saved > complete[-1]
