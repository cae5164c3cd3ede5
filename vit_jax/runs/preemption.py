"""Stopping at a step boundary when the job is told to (SIGTERM is how TPU VMs, SLURM and
Kubernetes announce a preemption), so the train loop can checkpoint and exit cleanly.

With several processes, JAX's coordination service spreads the notice to every
process and `reached_preemption_sync_point` makes all of them stop at the same step.
"""

import signal
import threading

import jax
from absl import logging
from jax.experimental import multihost_utils


class PreemptionWatcher:
  """`should_stop(step)` turns True at the first step boundary after a SIGTERM."""

  def __init__(self):
    self._requested = threading.Event()
    self._multi_process = jax.process_count() > 1
    if not self._multi_process and threading.current_thread() is threading.main_thread():
      self._previous = signal.signal(signal.SIGTERM, self._on_signal)

  def _on_signal(self, signum, frame):
    logging.warning("received SIGTERM: saving a checkpoint at the next step boundary")
    self._requested.set()

  def request(self) -> None:
    """Asks for a stop as if SIGTERM had arrived (for tests and notebooks)."""
    self._requested.set()

  def should_stop(self, step: int) -> bool:
    if self._multi_process:  # every process must call this at every step
      return multihost_utils.reached_preemption_sync_point(step)
    return self._requested.is_set()

  def close(self) -> None:
    """Restores the previous SIGTERM handler."""
    if hasattr(self, "_previous"):
      signal.signal(signal.SIGTERM, self._previous)
      del self._previous
