"""Two processes x 4 CPU devices train like one process with 1 device (test_main: like one
with 8 devices on each mesh, too), and their checkpoint resumes in a single process."""

import json
import logging
import os
import time

import numpy as np
import pytest

import fork_server
from conftest import REPO
from helpers import (assert_params_close, demo_args, demo_config, free_port, load_params,
                     read_metrics, subprocess_env, wait_for)
from vit_jax.training import loop

pytestmark = pytest.mark.long  # real-process runs: start first (conftest)

# The shared demo run (helpers.DEMO_SETTINGS), evaluated and saved once, at its end.
AT_THE_END = dict(eval_every=6, checkpoint_every=6)
ARGS = demo_args(**AT_THE_END)


# Past the 30 s after which a Gloo connection opened at a collective's first call gave up
# (vit_jax/main.py opens them as the processes join).
LATE_S = 35


def launch(workdir, devices, tag, *extra, late_s=0):
  """Starts the main job with `devices` CPU devices (a real process: tests/fork_server.py),
  logging to <workdir>.<tag>.log; its steps start late_s seconds late (late_first_step)."""
  command, cwd = ["vit_jax.main", *ARGS, f"--workdir={workdir}", *extra], REPO
  if late_s:  # a module of tests/, found from there (the paths in ARGS are absolute)
    command, cwd = ["late_first_step", str(late_s), *command], REPO / "tests"
  return fork_server.start(command, subprocess_env(devices), cwd, f"{workdir}.{tag}.log")


def output(workdir, tag):
  return open(f"{workdir}.{tag}.log").read()


def test_two_processes_match_one_process_and_resume_in_one(tmp_path, caplog, demo_run):
  port = free_port()
  two = str(tmp_path / "two")
  # Process 1 compiles its first step over 30 s after process 0 (as on a busy host).
  workers = [launch(two, 4, str(i), f"--coordinator_address=127.0.0.1:{port}", "--num_processes=2",
                    f"--process_id={i}", late_s=LATE_S * i) for i in range(2)]
  codes = [w.wait(timeout=400) for w in workers]
  assert codes == [0, 0], output(two, "0")[-3000:] + output(two, "1")[-3000:]
  assert "process 1 of 2 reads rows [16, 32) of every global batch of 32" in output(two, "1")
  assert "process 0 of 2 reads rows [0, 16)" in output(two, "0")
  with open(os.path.join(two, "final_metrics.json")) as f:
    final = json.load(f)
  assert final["eval/examples"] == 300  # evaluation exact across processes
  with open(os.path.join(two, "per_class_metrics.json")) as f:  # each host's share once
    confusion = np.array(json.load(f)["sets"]["eval/test"]["confusion_matrix"])
  assert confusion.sum() == 300 and np.trace(confusion) / 300 == final["eval/accuracy"]
  assert final["eval/balanced_accuracy"] == pytest.approx(
      np.mean(np.diag(confusion) / confusion.sum(1)))
  # One device: the same job in this (1-device) test process (conftest's demo run).
  assert_params_close(load_params(demo_run[0]), load_params(two))

  with caplog.at_level(logging.INFO):  # in one process, here
    loop.train_and_evaluate(demo_config(**AT_THE_END, total_steps=8), two)
  assert "resumed from step 6" in caplog.text


def test_a_dead_peer_stops_the_survivor(tmp_path):
  port = free_port()
  workdir = str(tmp_path / "run")
  # The first test's programs; saving every step keeps the survivor mid-run for seconds
  # after its first step, whose metrics row says that training has begun.
  workers = [launch(workdir, 4, str(i), f"--coordinator_address=127.0.0.1:{port}",
                    "--num_processes=2", f"--process_id={i}", "--heartbeat_timeout=10",
                    "--config.progress_every=1", "--config.checkpoint_every=1")
             for i in range(2)]
  wait_for(lambda: any("train/loss" in row for row in read_metrics(workdir)), workers[0],
           timeout=300, details=lambda: output(workdir, "0")[-3000:])
  workers[1].kill()
  killed_at = time.time()
  code = workers[0].wait(timeout=120)
  assert code != 0
  assert time.time() - killed_at < 90
