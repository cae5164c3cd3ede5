"""Stopping at a step boundary when the job is told to, so the train loop can checkpoint
and exit cleanly: SIGTERM (how TPU VMs, SLURM and Kubernetes announce a preemption) and a
first Ctrl-C (SIGINT) both save the current step; a second Ctrl-C aborts at once
(SIGINTs that arrive together are one press).

Python runs signal handlers only between bytecodes of the main thread, which may sit in
one XLA call for seconds (a compilation, a long step). So SIGINT is also written to a
wakeup pipe (signal.set_wakeup_fd) that a watcher thread reads at once: it says what will
happen the moment the key is pressed, and ends the process on the second press, whatever
the main thread is doing.

With several processes, JAX's coordination service spreads a SIGTERM notice to every
process and `reached_preemption_sync_point` makes all of them stop at the same step; a
Ctrl-C there stays Python's KeyboardInterrupt (one line, exit 130, see vit_jax.base.cli).
"""

import os
import signal
import sys
import threading
import time
from typing import Optional

import jax
from jax.experimental import multihost_utils

from vit_jax.base.console import log

INTERRUPTED_EXIT_CODE = 130  # as vit_jax.base.cli's: 128 + SIGINT
# SIGINTs read together, or this close together, are one press: Ctrl-C on a run under
# `timeout` (or any wrapper that forwards signals) delivers the terminal's and the
# wrapper's copy at once, which counted as the second press and aborted without saving.
SAME_PRESS_S = 0.05


class Interrupted(KeyboardInterrupt):
  """Ctrl-C stopped the run after its checkpoint was saved; the message says where."""


def _abort() -> None:
  print("second Ctrl-C: aborted at once, without saving; the last saved checkpoint is "
        "intact", file=sys.stderr, flush=True)
  os._exit(INTERRUPTED_EXIT_CODE)  # pylint: disable=protected-access  # no cleanup: at once


class PreemptionWatcher:
  """`should_stop(step)` turns True at the first step boundary after a SIGTERM or a first
  Ctrl-C; `interrupted` says it was a Ctrl-C (the caller then raises Interrupted)."""

  def __init__(self):
    self._requested = threading.Event()
    self.interrupted = False
    self._multi_process = jax.process_count() > 1
    self._handlers = {}
    self._pipe: Optional[tuple] = None
    if self._multi_process or threading.current_thread() is not threading.main_thread():
      return
    self._handlers[signal.SIGTERM] = signal.signal(signal.SIGTERM, self._on_sigterm)
    self._handlers[signal.SIGINT] = signal.signal(signal.SIGINT, self._on_sigint)
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)
    self._previous_wakeup = signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
    self._pipe = (read_end, write_end)
    threading.Thread(target=self._read_signals, args=(read_end,), daemon=True,
                     name="ctrl-c").start()

  def _on_sigterm(self, signum, frame):
    log.warning("received SIGTERM: saving a checkpoint at the next step boundary")
    self._requested.set()

  def _on_sigint(self, signum, frame):
    """The main thread's share: nothing (the thread has acted). Without a Python handler
    the interpreter would raise KeyboardInterrupt mid-step."""

  def _read_signals(self, read_end: int) -> None:
    presses, last_press = 0, 0.0
    while True:
      try:
        data = os.read(read_end, 64)
      except OSError:
        data = b""
      if not data:  # close() closed the write end
        os.close(read_end)
        return
      now = time.monotonic()  # SIGINTs read at once, or this close, are one press
      if signal.SIGINT not in data or (presses and now - last_press < SAME_PRESS_S):
        continue
      presses, last_press = presses + 1, now
      if presses > 1:
        _abort()
      self.interrupted = True
      self._requested.set()
      print("Ctrl-C: saving a checkpoint at the next step boundary, then stopping (Ctrl-C "
            "again aborts at once, without saving)", file=sys.stderr, flush=True)

  def request(self) -> None:
    """Asks for a stop as if SIGTERM had arrived (for tests and notebooks)."""
    self._requested.set()

  def should_stop(self, step: int) -> bool:
    if self._multi_process:  # every process must call this at every step
      return multihost_utils.reached_preemption_sync_point(step)
    return self._requested.is_set()

  def close(self) -> None:
    """Restores the previous handlers and wakeup fd; a Ctrl-C after this is Python's."""
    for signum, handler in self._handlers.items():
      signal.signal(signum, handler)
    self._handlers = {}
    if self._pipe is not None:
      signal.set_wakeup_fd(self._previous_wakeup)
      os.close(self._pipe[1])  # the thread reads EOF and ends
      self._pipe = None
