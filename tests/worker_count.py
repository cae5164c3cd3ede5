"""How many pytest-xdist workers `-n auto` starts: one more than the cores on a small host
that has the memory for it. About an eighth of the cores' time (120 of 925 core-seconds
on the 2-core VM) is a worker waiting, not computing: tensorstore's bounded retries after
a store is cut, a dead peer's heartbeat, servers and subprocesses starting. With a worker
per core, that core idles; a third worker on a 2-core host fills it (the 2-core VM,
compile cache kept: 7 min 17 s instead of 7 min 42 s, 15 GB at the peak).
PYTEST_XDIST_AUTO_NUM_WORKERS still decides where it is set to a number; another value is
ignored, as pytest-xdist ignores it, but with a warning that pytest shows."""

import os
from typing import Optional

from vit_jax.data import worker_limit

MOST_CORES = 4  # beyond this, one idle core is a small share
GIB_PER_WORKER = 5  # a worker, its fork server and the runs it starts, at their peak


SETTING = "PYTEST_XDIST_AUTO_NUM_WORKERS"


def ignored_setting() -> Optional[str]:
  """What to warn when SETTING is set but not a number (pytest-xdist's own warning of it
  is lost before pytest shows warnings), or None."""
  value = os.environ.get(SETTING)
  if not value:
    return None
  try:
    int(value)  # what pytest-xdist reads
    return None
  except ValueError:
    return (f"{SETTING}={value!r} is not a number of workers and is ignored: -n auto starts "
            f"its own count; set it to one, e.g. {SETTING}=3, or unset it")


def auto_workers() -> Optional[int]:
  """The count, or None for pytest-xdist's own (a worker per core, or SETTING's)."""
  if os.environ.get(SETTING) and ignored_setting() is None:
    return None
  cores = worker_limit.usable_cores()
  if cores > MOST_CORES or _available_gib() < GIB_PER_WORKER * (cores + 1):
    return None
  return cores + 1


def _available_gib() -> float:
  try:
    with open("/proc/meminfo", encoding="ascii") as f:
      fields = dict(line.split(":", 1) for line in f)
    return int(fields["MemAvailable"].split()[0]) / 2**20
  except (OSError, KeyError, ValueError):
    return 0.0
