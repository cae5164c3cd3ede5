"""The main job with --workdir=gs://... against a real Cloud Storage emulator (the `gcs`
fixture): the same results as a local run, resume after SIGKILL, one run per workdir,
nothing rewritten by a finished rerun, two processes on one workdir, and a store that goes
away mid-run. Runs are shared between assertions to keep the module short."""

import io
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from conftest import REPO
from helpers import read_metrics
from vit_jax.runs import fs

ARGS = ["--config=configs/demo.py", "--config.batch=32", "--config.total_steps=16",
        "--config.checkpoint_every=4", "--config.eval_every=1000", "--config.progress_every=2",
        "--config.warmup_steps=2"]
TIMINGS = ("train/img_per_sec", "train/img_per_sec_per_device")


def start(workdir, *extra, tag="run", devices=1):
  """The main job on `workdir`, its output in <tmp>/<tag>.log (see output())."""
  env = {**os.environ, "PYTHONPATH": str(REPO), "TF_CPP_MIN_LOG_LEVEL": "3",
         "XLA_FLAGS": f"--xla_force_host_platform_device_count={devices}"}
  log = open(os.path.join(os.environ["GCS_TEST_LOGS"], f"{tag}.log"), "w")
  return subprocess.Popen([sys.executable, "-m", "vit_jax.main", *ARGS, f"--workdir={workdir}",
                           *extra], cwd=REPO, env=env, stdout=log, stderr=log)


def output(tag):
  with open(os.path.join(os.environ["GCS_TEST_LOGS"], f"{tag}.log")) as f:
    return f.read()


def finish(process, tag, timeout=400):
  process.wait(timeout=timeout)
  return process.returncode, output(tag)


def wait_for(predicate, process, timeout=240):
  deadline = time.time() + timeout
  while not predicate():
    assert process.poll() is None and time.time() < deadline, "the run ended or stalled"
    time.sleep(0.3)


def params(workdir):
  with np.load(io.BytesIO(fs.read_bytes(fs.join(workdir, "params.npz")))) as f:
    return {k: f[k] for k in f.files}


def checkpoint_steps(workdir):
  """Steps whose checkpoint is complete (orbax's commit marker on object stores)."""
  folder = fs.join(workdir, "checkpoints")
  return sorted(int(name) for name in fs.listdir(folder) if name.isdigit() and
                fs.exists(fs.join(folder, name, "commit_success.txt")))


def snapshot(workdir):
  """Every object under a gs:// workdir with its generation: any rewrite changes it."""
  filesystem, key = fs._url_fs(workdir)  # pylint: disable=protected-access
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


@pytest.fixture(scope="module")
def reference(gcs, logs):
  """One local and one gs:// run of the same config, side by side."""
  local, remote = str(logs / "local"), f"gs://{gcs.bucket}/run"
  runs = [start(local, tag="local"), start(remote, tag="remote")]
  for run, tag in zip(runs, ("local", "remote")):
    code, log = finish(run, tag)
    assert code == 0, log[-3000:]
  return local, remote


def test_a_gs_run_matches_a_local_run_and_a_finished_rerun_writes_nothing(reference):
  local, remote = reference
  assert layout(fs.listdir(remote)) == layout(os.listdir(local))
  assert "run.lock" not in fs.listdir(remote) and "metrics.parts" not in fs.listdir(remote)
  assert checkpoint_steps(remote) == [12, 16]  # retention: the last two of four
  assert sorted(int(n) for n in os.listdir(os.path.join(local, "checkpoints"))) == [12, 16]
  ours, theirs = params(remote), params(local)
  assert ours.keys() == theirs.keys()
  for key in theirs:
    np.testing.assert_array_equal(ours[key], theirs[key], err_msg=key)
  strip = lambda rows: [{k: v for k, v in r.items() if k not in TIMINGS} for r in rows]
  assert strip(read_metrics(remote)) == strip(read_metrics(local))
  for name in ("config.json", "final_metrics.json", "parameters.txt"):
    assert fs.read_text(fs.join(remote, name)) == fs.read_text(os.path.join(local, name)), name

  before = snapshot(remote)
  code, log = finish(start(remote, tag="rerun"), "rerun")
  assert code == 0 and "already finished at step 16" in log, log[-2000:]
  assert snapshot(remote) == before


def test_sigkill_then_rerun_resumes_exactly_and_a_live_run_is_not_shared(gcs, reference):
  """Also: the newest checkpoint, damaged after the kill, is set aside on the bucket and
  the one before it used, still ending with the uninterrupted run's parameters."""
  workdir = f"gs://{gcs.bucket}/killed"
  run = start(workdir, tag="killed")
  wait_for(lambda: len(checkpoint_steps(workdir)) >= 2, run)
  second = start(workdir, "--config.base_lr=0.1", tag="second")
  run.send_signal(signal.SIGSTOP)  # keep the holder alive (and mid-run) meanwhile
  try:
    code, log = finish(second, "second")
  finally:
    run.send_signal(signal.SIGKILL)
    run.wait()
  errors = [line for line in log.splitlines() if line.startswith("error: ")]
  assert code == 1 and errors == log.strip().splitlines()[-1:], log[-2000:]
  assert "is in use by another run" in errors[0] and f"pid {run.pid}," in errors[0]

  *_, usable, damaged = checkpoint_steps(workdir)
  fs.write_atomic(fs.join(workdir, "checkpoints", str(damaged), "default", "manifest.ocdbt"),
                  b"garbage")
  code, log = finish(start(workdir, tag="resumed"), "resumed")
  assert code == 0, log[-3000:]
  assert f"checkpoint {damaged} cannot be used" in log and damaged < 16
  assert f"resumed from step {usable} " in log
  assert [name.split("-")[0] for name in fs.listdir(fs.join(workdir, "damaged_checkpoints"))
          ] == [str(damaged)]
  assert [r["step"] for r in read_metrics(workdir) if "train/loss" in r] == list(range(2, 17, 2))
  expected = params(reference[0])
  resumed = params(workdir)
  for key in expected:
    np.testing.assert_allclose(resumed[key], expected[key], rtol=1e-6, atol=1e-7, err_msg=key)


def test_two_processes_with_four_devices_share_one_gs_workdir(gcs, logs):
  from test_multiprocess import free_port  # pylint: disable=import-outside-toplevel
  workdir, port = f"gs://{gcs.bucket}/pod", free_port()
  workers = [start(workdir, f"--coordinator_address=127.0.0.1:{port}", "--num_processes=2",
                   f"--process_id={i}", "--config.total_steps=8", tag=f"pod{i}", devices=4)
             for i in range(2)]
  results = [finish(worker, f"pod{i}") for i, worker in enumerate(workers)]
  assert [code for code, _ in results] == [0, 0], results[0][1][-3000:] + results[1][1][-3000:]
  assert checkpoint_steps(workdir) == [4, 8]
  assert [r["step"] for r in read_metrics(workdir) if "train/loss" in r] == [2, 4, 6, 8]
  assert "run.lock" not in fs.listdir(workdir) and "params.npz" in fs.listdir(workdir)


def test_sigterm_saves_and_a_store_that_goes_away_fails_in_one_line(gcs, logs):
  """SIGTERM saves the current step on the bucket; later the emulator is stopped mid-run:
  one line, and the rerun resumes from the last complete checkpoint."""
  workdir = f"gs://{gcs.bucket}/outage"
  long_run = ["--config.total_steps=100000", "--config.checkpoint_every=8"]
  run = start(workdir, *long_run, tag="preempted")
  wait_for(lambda: checkpoint_steps(workdir), run)
  run.send_signal(signal.SIGTERM)
  code, log = finish(run, "preempted")
  saved = checkpoint_steps(workdir)[-1]
  assert code == 0 and f"saved the checkpoint of step {saved} in gs://" in log, log[-2000:]

  run = start(workdir, *long_run, tag="outage")
  wait_for(lambda: checkpoint_steps(workdir)[-1] > saved, run)
  gcs.stop()
  try:
    code, log = finish(run, "outage", timeout=300)
  finally:
    gcs.start()
  lines = log.strip().splitlines()
  assert code == 1 and lines[-1].startswith("error: lost the connection to gs://"), log[-3000:]
  assert "Traceback" not in log
  complete = checkpoint_steps(workdir)
  code, log = finish(start(workdir, "--config.total_steps=" + str(complete[-1] + 4),
                           tag="after_outage"), "after_outage")
  assert code == 0, log[-3000:]
  assert f"resumed from step {complete[-1]} " in log, log[-2000:]
