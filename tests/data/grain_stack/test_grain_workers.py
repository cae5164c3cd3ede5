"""Grain's worker processes: gone with their run when it is SIGKILLed, leaving nothing in
/dev/shm (their count is checked in tests/data/test_worker_limit.py); their batches'
shared memory unlinked on arrival through a private flag of Grain's, checked here."""

import gc
import importlib.metadata
import os
import signal
import subprocess
import sys
from multiprocessing import shared_memory

import numpy as np
import pytest

from conftest import REPO
from helpers import subprocess_env, wait_for
from vit_jax.data.grain_stack import grain_workers

# A run's loader with a worker, a batch read (shared memory and semaphores in use),
# then waiting to be killed or interrupted (Ctrl-C: the batches closed, as a run does).
HOLDER = """
import time
from helpers import make_config
from vit_jax.data import loaders
config = make_config()
config.loader, config.grain_workers = "grain", 1
batches = loaders.open_dataset(config).train_batches(
    batch_size=8, start_step=0, num_steps=1000, seed=3, process_index=0, process_count=1)
batch = next(batches)
print("ready", flush=True)
try:
  time.sleep(120)
except KeyboardInterrupt:
  del batch
  batches.close()
  print("interrupted", flush=True)
"""


def _children(pid):
  """pids whose parent is `pid`."""
  found = []
  for entry in os.listdir("/proc"):
    try:
      with open(f"/proc/{entry}/stat") as f:
        if entry.isdigit() and int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
          found.append(int(entry))
    except (OSError, IndexError):
      continue
  return found


def _shared_memory(pids):
  """The /dev/shm files (segments, semaphores) the processes have mapped."""
  names = set()
  for pid in pids:
    with open(f"/proc/{pid}/maps") as f:
      names |= {line.split()[-1] for line in f if " /dev/shm/" in line}
  return names


def _alive(pid):
  try:
    with open(f"/proc/{pid}/stat") as f:
      return f.read().rsplit(")", 1)[1].split()[0] != "Z"
  except OSError:
    return False


def _start_holder(log):
  with open(log, "w") as output:
    run = subprocess.Popen(
        [sys.executable, "-c", HOLDER], stdout=output, stderr=subprocess.STDOUT,
        start_new_session=True,  # its own process group, as a terminal's job
        env=subprocess_env(PYTHONPATH=os.pathsep.join([str(REPO), str(REPO / "tests")])))
  wait_for(lambda: "ready" in log.read_text(), run, timeout=120, details=log.read_text)
  children = _children(run.pid)  # the worker and the resource tracker
  assert len(children) == 2, children
  return run, children


def _gone(children, shared):
  wait_for(lambda: not any(map(_alive, children)), timeout=20,
           details=lambda: f"still running: {[p for p in children if _alive(p)]}")
  wait_for(lambda: not any(map(os.path.exists, shared)), timeout=10,
           details=lambda: f"left in /dev/shm: {[p for p in shared if os.path.exists(p)]}")


@pytest.mark.parametrize("how", ["SIGKILL", "Ctrl-C"])
def test_a_run_with_workers_leaves_no_process_and_nothing_in_dev_shm(tmp_path, how):
  """SIGKILL (or the OOM killer) of the run; Ctrl-C in its terminal, which reaches the
  workers too: no KeyboardInterrupt traceback of theirs. Either way the resource tracker,
  which unlinks what a killed run left, says nothing ("... leaked semaphore objects")."""
  log = tmp_path / "log"
  run, children = _start_holder(log)
  try:
    shared = _shared_memory([run.pid, *children])
    assert shared, "the run maps no shared memory: nothing is tested"
    if how == "SIGKILL":
      run.send_signal(signal.SIGKILL)
    else:
      os.killpg(run.pid, signal.SIGINT)
    run.wait(timeout=60)
    _gone(children, shared)  # the tracker too: its last words, if any, are in the log
    said = "ready\ninterrupted\n" if how == "Ctrl-C" else "ready\n"
    assert log.read_text() == said, log.read_text()
    assert run.returncode == (0 if how == "Ctrl-C" else -signal.SIGKILL)
  finally:
    if run.poll() is None:
      run.kill()
      run.wait()


def test_grains_private_unlink_flag_still_does_what_unlinked_relies_on(monkeypatch):
  """grain_workers.unlinked unlinks an arriving array's shared memory at once and clears
  Grain's private SharedMemoryArray._unlink_on_del, so that dropping the array only closes
  it. A Grain that renames the flag or stops reading it on del fails here, by name."""
  # pylint: disable-next=import-outside-toplevel
  from grain._src.python.ipc.shared_memory_array import SharedMemoryArray
  changed = (f"grain {importlib.metadata.version('grain')} changed SharedMemoryArray."
             "_unlink_on_del, which vit_jax/data/grain_stack/grain_workers.unlinked relies on")
  array = SharedMemoryArray((4,), np.float32)
  array.unlink_on_del()  # as Grain marks each array that arrives from a worker
  assert getattr(array, "_unlink_on_del", None) is True, changed
  path = os.path.join("/dev/shm", array.shm.name.lstrip("/"))
  assert grain_workers.unlinked({"image": {"patches": array}})["image"]["patches"] is array
  # pylint: disable-next=protected-access
  assert not os.path.exists(path) and array._unlink_on_del is False, changed
  unlinks = []
  monkeypatch.setattr(shared_memory.SharedMemory, "unlink", lambda shm: unlinks.append(shm))
  del array
  gc.collect()
  pool = getattr(SharedMemoryArray, "_del_thread_pool", None)  # set once workers ran here
  if pool is not None:
    pool.apply(int)  # one thread: the del's close has run when this returns
  assert not unlinks, f"{changed}: it unlinks again on del"
