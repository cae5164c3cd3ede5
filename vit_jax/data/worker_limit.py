"""How many Grain worker processes (config.grain_workers) a run may start: checked with
the other loader keys before any stack is imported, so it lives beside them, not in the
Grain stack (grain_stack/grain_workers.py starts them)."""

import os

from vit_jax.base import errors


def usable_cores() -> int:
  """The CPU cores this process may run on (its affinity mask, e.g. a container's)."""
  try:
    return len(os.sched_getaffinity(0))
  except AttributeError:  # not Linux
    return os.cpu_count() or 1


def check(config) -> None:
  """config.grain_workers: an int from 0 to the usable cores, with the Grain loader (10000
  forked ~390 processes and stalled the host; with the tf loader it was ignored)."""
  workers = config.get("grain_workers", 0)
  if not isinstance(workers, int) or isinstance(workers, bool) or workers < 0:
    raise errors.InvalidInput(f"config.grain_workers={workers!r} must be >= 0 "
                              "(0: no worker processes)")
  if workers and config.get("loader", "tf") != "grain":
    raise errors.InvalidInput(
        f"config.grain_workers={workers} starts worker processes of the Grain loader only; "
        f"set config.loader='grain', or config.grain_workers=0 with "
        f"config.loader={config.get('loader', 'tf')!r}")
  cores = usable_cores()
  if workers > cores:
    raise errors.InvalidInput(
        f"config.grain_workers={workers} is more than the {cores} CPU cores this process "
        f"may use; set it to at most {cores}")
