"""Ctrl-C on a run: SIGINTs that arrive together (a terminal's and a wrapper's forwarded
copy, as under `timeout`) are one press and save; a later press aborts."""

import os
import signal
import time

from helpers import wait_for
from vit_jax.training.runs import preemption


def test_two_sigints_at_once_are_one_press_and_a_later_one_aborts(monkeypatch):
  aborted = []
  monkeypatch.setattr(preemption, "_abort", lambda: aborted.append(time.monotonic()))
  watcher = preemption.PreemptionWatcher()
  try:
    os.kill(os.getpid(), signal.SIGINT)  # the terminal's
    os.kill(os.getpid(), signal.SIGINT)  # the wrapper's copy, at once
    wait_for(lambda: watcher.interrupted, timeout=5)
    time.sleep(preemption.SAME_PRESS_S + 0.1)
    assert watcher.should_stop(1) and not aborted
    os.kill(os.getpid(), signal.SIGINT)  # a second press
    wait_for(lambda: aborted, timeout=5)
  finally:
    watcher.close()
