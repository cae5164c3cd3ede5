"""Grain's worker processes (config.grain_workers): what each does first so that none
outlives its run, and their batches' shared memory released on arrival (how many a run
may start: vit_jax.data.worker_limit).

Grain spawns its workers as daemons, which end with a parent that exits normally; a
parent killed by SIGKILL (or the OOM killer) left them running, reparented, with
multiprocessing's resource tracker and their semaphores and shared memory in /dev/shm.
Each worker therefore watches its parent (the pipe multiprocessing keeps to it closes
when the parent dies, however it dies) and exits with it; the resource tracker, whose
last client is then gone, unlinks what they left, quietly (quiet_resource_tracker).
Workers also ignore SIGINT: Ctrl-C in a terminal reaches the whole process group, and the
run itself stops them on its way out.
"""

import multiprocessing
import os
import signal
import threading
from multiprocessing import resource_tracker

from grain._src.python.ipc import shared_memory_array  # pylint: disable=g-direct-tensorflow-import


# The tracker's "There appear to be N leaked semaphore (shared_memory) objects to clean
# up at shutdown": after a SIGKILL, what it then unlinks is the run's own, expected.
_TRACKER_QUIET = "ignore:resource_tracker:UserWarning:multiprocessing.resource_tracker"


def quiet_resource_tracker() -> None:
  """Starts multiprocessing's resource tracker, unless one runs, without its warnings:
  a SIGKILLed run's tracker still unlinks its semaphores and shared memory, but said
  so in two lines that looked like a fault. Called before the workers start (they share
  this process's tracker); the tracker reads its warning filters from PYTHONWARNINGS
  when it starts, which is set for that moment only."""
  saved = os.environ.get("PYTHONWARNINGS")
  os.environ["PYTHONWARNINGS"] = ",".join(filter(None, [saved, _TRACKER_QUIET]))
  try:
    resource_tracker.ensure_running()
  finally:
    if saved is None:
      del os.environ["PYTHONWARNINGS"]
    else:
      os.environ["PYTHONWARNINGS"] = saved


def start_in_worker(  # pylint: disable=unused-argument
    worker_index: int, worker_count: int) -> None:
  """Grain's worker_init_fn (called with the worker's index and count): ignore SIGINT and
  exit as soon as the parent is gone."""
  signal.signal(signal.SIGINT, signal.SIG_IGN)
  parent = multiprocessing.parent_process()
  if parent is not None:
    threading.Thread(target=_exit_with, args=(parent,), name="exit-with-parent",
                     daemon=True).start()


def _exit_with(parent) -> None:
  parent.join()  # returns once the parent's end of the pipe closes: it died
  os._exit(1)  # pylint: disable=protected-access  # no cleanup of a dead parent's state


def _leaves(tree: dict):
  for value in tree.values():
    if isinstance(value, dict):
      yield from _leaves(value)
    else:
      yield value


def unlinked(batch: dict) -> dict:
  """A batch from the workers, its shared memory unlinked at once (the arrays stay valid
  until dropped). Grain unlinks it when the array is garbage-collected, in a thread pool
  that does not outlive the interpreter: every run with workers ended with the resource
  tracker's "leaked shared_memory" warning for the batches still held at exit. Nested
  dicts (a NaFlex batch's image) are walked too. The flag is Grain's private one (no
  public way to clear it): tests/data/grain_stack/test_grain_workers.py names the Grain
  that changes it."""
  for array in _leaves(batch):
    if (isinstance(array, shared_memory_array.SharedMemoryArray) and
        array._unlink_on_del):  # pylint: disable=protected-access
      array.shm.unlink()
      array._unlink_on_del = False  # pylint: disable=protected-access  # closed only, on del
  return batch
