"""The run's working directory: usable before anything is written, and one job at a time.

Two jobs writing one workdir replace each other's checkpoints, config and params, so the
main job holds `<workdir>/run.lock` while it runs. The lock is per job: in a multi-host
run only process 0 takes it (the others share the workdir legitimately). A lock left by
a process that died without releasing it (SIGKILL, a preempted VM) is stale, and a new
run takes it over:
  * same host: stale when the holder's pid is gone, or now belongs to a process started
    after the lock was written (pid reuse);
  * another host: stale when its heartbeat (the file's mtime, touched every
    HEARTBEAT_S by the holder) is older than STALE_AFTER_S.
"""

import contextlib
import json
import os
import socket
import threading
import time
from typing import Optional

import jax
import numpy as np
from jax.experimental import multihost_utils

from vit_jax import errors

LOCK_NAME = "run.lock"
HEARTBEAT_S = 15.0
STALE_AFTER_S = 90.0  # six missed heartbeats: a restarted job waits at most this long


class WorkdirError(errors.InvalidInput):
  """A workdir that cannot be used; the message names it and the fix."""


def prepare(workdir: str) -> bool:
  """Creates `workdir` if needed and checks that it is a writable directory.

  Returns whether it was created (so a run that fails early can remove it again).
  URLs are refused: the job's own files (lock, metrics.jsonl, config.json) need a POSIX
  filesystem, and os.makedirs would quietly make a local folder named `gs:`.
  """
  if "://" in workdir:
    raise WorkdirError(f"--workdir={workdir} is a URL; the workdir must be a filesystem path: "
                       "mount the bucket (e.g. gcsfuse gs://BUCKET /mnt/BUCKET) and pass "
                       "--workdir=/mnt/BUCKET/...")
  if os.path.exists(workdir) and not os.path.isdir(workdir):
    raise WorkdirError(f"--workdir={workdir} is a file, not a directory: pass a directory "
                       "path (it is created if missing)")
  created = not os.path.exists(workdir)
  try:
    os.makedirs(workdir, exist_ok=True)
  except OSError as e:
    raise WorkdirError(f"cannot create --workdir={workdir}: {e.strerror}; pick a location "
                       "you can write to") from None
  if not os.access(workdir, os.W_OK | os.X_OK):
    raise WorkdirError(f"--workdir={workdir} is not writable by this user: fix its "
                       "permissions or pick another directory")
  return created


def remove_if_empty(workdir: str) -> None:
  """Undoes prepare() for a run that failed before writing anything."""
  try:
    os.rmdir(workdir)
  except OSError:
    pass


def _process_start_time(pid: int) -> Optional[float]:
  """Seconds since boot at which `pid` started (Linux), or None where unknown."""
  try:
    with open(f"/proc/{pid}/stat", encoding="utf-8") as f:
      fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[19]) / os.sysconf("SC_CLK_TCK")
  except (OSError, IndexError, ValueError):
    return None


def _boot_time() -> Optional[float]:
  try:
    with open("/proc/stat", encoding="utf-8") as f:
      return float(next(line.split()[1] for line in f if line.startswith("btime")))
  except (OSError, StopIteration, ValueError):
    return None


def _pid_alive(pid: int) -> bool:
  try:
    os.kill(pid, 0)
  except ProcessLookupError:
    return False
  except PermissionError:  # another user's live process
    return True
  return True


def _describe(holder: dict) -> str:
  started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(holder.get("started", 0)))
  return f"host {holder.get('host', '?')}, pid {holder.get('pid', '?')}, since {started}"


class WorkdirLock:
  """Exclusive use of a workdir by one job; `release()` (or the context) gives it back."""

  def __init__(self, workdir: str):
    self.path = os.path.join(workdir, LOCK_NAME)
    self.workdir = workdir
    self._stop = threading.Event()
    self._heartbeat: Optional[threading.Thread] = None
    self._held = False

  def _holder(self) -> Optional[dict]:
    try:
      with open(self.path, encoding="utf-8") as f:
        holder = json.load(f)
      holder["heartbeat"] = os.path.getmtime(self.path)
      return holder
    except FileNotFoundError:
      return None
    except (OSError, ValueError):  # half-written by a holder killed while creating it
      return {"heartbeat": os.path.getmtime(self.path) if os.path.exists(self.path) else 0}

  @staticmethod
  def is_stale(holder: dict, now: Optional[float] = None) -> bool:
    """Whether the process described by `holder` can no longer be running."""
    now = time.time() if now is None else now
    if holder.get("host") == socket.gethostname() and "pid" in holder:
      pid = int(holder["pid"])
      if not _pid_alive(pid):
        return True
      start, boot = _process_start_time(pid), _boot_time()
      if start is not None and boot is not None and "started" in holder:
        return boot + start > holder["started"] + 1.0  # the pid was reused
      return False
    return now - holder.get("heartbeat", 0) > STALE_AFTER_S

  def acquire(self) -> "WorkdirLock":
    """Takes the lock, or raises WorkdirError naming the live holder."""
    record = json.dumps({"host": socket.gethostname(), "pid": os.getpid(),
                         "started": time.time()})
    for _ in range(3):
      try:
        fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
      except FileExistsError:
        holder = self._holder()
        if holder is None:
          continue  # released meanwhile
        if not self.is_stale(holder):
          raise WorkdirError(
              f"--workdir={self.workdir} is in use by another run ({_describe(holder)}): wait "
              f"for it to finish, stop it, or pick another --workdir; if that process is "
              f"gone, delete {self.path}") from None
        # Stale: move it out of the way; of two racing runs only one rename succeeds.
        try:
          os.replace(self.path, f"{self.path}.stale-{os.getpid()}")
          os.unlink(f"{self.path}.stale-{os.getpid()}")
        except FileNotFoundError:
          pass
        continue
      with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(record)
      self._held = True
      self._heartbeat = threading.Thread(target=self._beat, daemon=True, name="workdir-lock")
      self._heartbeat.start()
      return self
    raise WorkdirError(f"could not take the lock {self.path} (other runs keep taking it): "
                       "make sure only one run uses this --workdir")

  def _beat(self) -> None:
    while not self._stop.wait(HEARTBEAT_S):
      try:
        os.utime(self.path)
      except OSError:
        pass

  def release(self) -> None:
    """Gives the lock back (only if it is still ours)."""
    if not self._held:
      return
    self._stop.set()
    self._heartbeat.join()
    self._held = False
    holder = self._holder()
    if holder and holder.get("pid") == os.getpid() and holder.get("host") == socket.gethostname():
      try:
        os.unlink(self.path)
      except FileNotFoundError:
        pass

  def __enter__(self):
    return self.acquire()

  def __exit__(self, *exc):
    self.release()


@contextlib.contextmanager
def held_for_this_job(workdir: str):
  """Creates/checks the workdir and holds its lock (process 0, for the whole job); a run
  that fails before writing anything leaves no empty workdir behind."""
  lock, error, created = None, None, False
  if jax.process_index() == 0:
    try:
      created = prepare(workdir)
      lock = WorkdirLock(workdir).acquire()
    except WorkdirError as e:
      error = e
  if jax.process_count() > 1:  # every process must learn that process 0 gave up
    all_ok = bool(multihost_utils.broadcast_one_to_all(np.int32(error is None)))
    if not all_ok and error is None:
      error = WorkdirError(f"process 0 cannot use --workdir={workdir}; see its log")
  if error is not None:
    if created:
      remove_if_empty(workdir)
    raise error
  try:
    yield
  finally:
    if lock is not None:
      lock.release()
    if created:
      remove_if_empty(workdir)
