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
The workdir may be a local path or an object-store URL (gs://): everything here goes
through vit_jax/base/storage.py. On GCS the lock is created with the precondition "no live object"
and a stale one is deleted only at the generation that was judged stale, so of two runs
racing for it exactly one wins, as with O_EXCL and rename on a local disk.
"""

import contextlib
import json
import os
import re
import socket
import tempfile
import threading
import time
from typing import Callable, List, Optional

import jax
import numpy as np
from jax.experimental import multihost_utils


from vit_jax.base import errors, object_moves, storage, url_clients, workdir_files

HEARTBEAT_S = 15.0
STALE_AFTER_S = 90.0  # six missed heartbeats: a restarted job waits at most this long
# A lock with no readable holder (empty or cut short: its writer died creating it, or the
# disk turned read-only) is a live run's only for the moment between create and write.
UNREADABLE_AFTER_S = 10.0
# What a run writes below its workdir takes up to this many more characters (orbax's
# checkpoint files, metrics, temporary names): a longer workdir path fails only then.
LONGEST_INSIDE = 200


class WorkdirError(errors.InvalidInput):
  """A workdir that cannot be used; the message names it and the fix."""


# Schemes a workdir may have beside local paths: what orbax's checkpoints, the lock's
# create-if-absent and every writer are known to work on (tests/test_train_gcs.py).
WORKDIR_SCHEMES = ("gs",)


def resolve(workdir: str) -> str:
  """The workdir as runs name it: file:///PATH is the local PATH; a URL of another
  scheme than WORKDIR_SCHEMES is refused in one line, before anything is written."""
  workdir = os.fspath(workdir)
  if not storage.is_url(workdir):
    return workdir
  scheme, rest = workdir.split("://", 1)
  if scheme == "file":
    host, slash, path = rest.partition("/")
    if host not in ("", "localhost") or not slash:
      raise WorkdirError(f"--workdir={workdir}: a file:// URL names a local path, "
                         "file:///PATH (three slashes): pass that PATH")
    return "/" + path
  if scheme not in WORKDIR_SCHEMES:
    raise WorkdirError(f"--workdir={workdir}: {scheme}:// cannot hold a run (its checkpoints "
                       "and lock); pass a local path or a gs://BUCKET/PATH URL")
  return workdir


def _prepare_url(workdir: str) -> bool:
  """Object stores have no folders to create; checks that the store answers and that
  the workdir is not an object. Writability shows when the lock is created."""
  bucket = "/".join(workdir.split("/")[:3])  # gs://BUCKET
  try:
    if not storage.exists(bucket):
      raise WorkdirError(f"--workdir={workdir}: the bucket {bucket} does not exist (or this "
                         "account cannot see it): create it or fix the name")
    if storage.isfile(workdir):
      raise WorkdirError(f"--workdir={workdir} is an object, not a folder: pass a prefix "
                         "that holds no object of that name")
    return not storage.isdir(workdir)
  except url_clients.UnsupportedURL as e:
    raise WorkdirError(f"cannot use --workdir={workdir}: {e}") from None
  except (OSError, ValueError) as e:  # auth, unknown bucket, unreachable endpoint
    raise WorkdirError(f"cannot use --workdir={workdir}: {' '.join(str(e).split())[:300]}; "
                       "check the bucket name and your credentials (gcloud auth "
                       "application-default login)") from None


def prepare(workdir: str) -> bool:
  """Creates `workdir` if needed and checks that it is a writable directory.

  Returns whether it was created (so a run that fails early can remove it again).
  """
  if storage.is_url(workdir):
    return _prepare_url(workdir)
  path_max = os.pathconf("/", "PC_PATH_MAX")
  if len(os.fsencode(os.path.abspath(workdir))) + LONGEST_INSIDE > path_max:
    raise WorkdirError(f"--workdir is {len(os.path.abspath(workdir)):,} characters long; the "
                       f"files a run writes inside it need up to {LONGEST_INSIDE} more, and "
                       f"paths are limited to {path_max}: pick a shorter path")
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
  storage.remove_empty_dir(workdir)


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


def _readable(holder: dict) -> bool:
  return "host" in holder and "pid" in holder


def _describe(holder: dict) -> str:
  if not _readable(holder):
    written = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(holder.get("heartbeat", 0)))
    return (f"a lock written at {written} that names no holder; it is taken over "
            f"{UNREADABLE_AFTER_S:.0f} s after it was written")
  started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(holder.get("started", 0)))
  return f"host {holder['host']}, pid {holder['pid']}, since {started}"


class WorkdirLock:
  """Exclusive use of a workdir by one job; `release()` (or the context) gives it back."""

  def __init__(self, workdir: str):
    self.path = storage.join(workdir, workdir_files.LOCK)
    self.workdir = workdir
    self._stop = threading.Event()
    self._heartbeat: Optional[threading.Thread] = None
    self._held = False

  def _holder(self) -> Optional[dict]:
    """The lock's record plus its heartbeat time (None: no lock); `generation` on GCS."""
    try:
      version = storage.generation(self.path)
      heartbeat = storage.modified_time(self.path)
      try:
        holder = json.loads(storage.read_text(self.path))
      except ValueError:  # half-written by a holder killed while creating it (local)
        holder = {}
    except FileNotFoundError:
      return None
    return {**holder, "heartbeat": heartbeat, "generation": version}

  @staticmethod
  def is_stale(holder: dict, now: Optional[float] = None) -> bool:
    """Whether the process described by `holder` can no longer be running."""
    now = time.time() if now is None else now
    if not _readable(holder):
      return now - holder.get("heartbeat", 0) > UNREADABLE_AFTER_S
    if holder.get("host") == socket.gethostname():
      pid = int(holder["pid"])
      if not storage.pid_alive(pid):
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
      if not storage.create_exclusive(self.path, record):
        holder = self._holder()
        if holder is None:
          continue  # released meanwhile
        if not self.is_stale(holder):
          raise WorkdirError(
              f"--workdir={self.workdir} is in use by another run ({_describe(holder)}): wait "
              f"for it to finish, stop it, or pick another --workdir; if that process is "
              f"gone, delete {self.path}") from None
        self._take_away_stale(holder)
        continue
      self._held = True
      self._heartbeat = threading.Thread(target=self._beat, daemon=True, name="workdir-lock")
      self._heartbeat.start()
      return self
    raise WorkdirError(f"could not take the lock {self.path} (other runs keep taking it): "
                       "make sure only one run uses this --workdir")

  def _take_away_stale(self, holder: dict) -> None:
    """Removes the stale lock so that create_exclusive can be retried; of two runs racing
    for it only one removal takes effect (local: a rename; GCS: a delete conditional on
    the stale generation), and only one create then succeeds."""
    if holder.get("generation") is not None:
      storage.remove_generation(self.path, holder["generation"])
      return
    aside = f"{self.path}.stale-{os.getpid()}"
    try:
      left = storage.move(self.path, aside)
    except FileNotFoundError:
      return
    if left:  # still there: retrying would only find the same stale lock
      raise WorkdirError(f"could not move the stale lock {self.path} aside "
                         f"({object_moves.named(left)} left in place): delete it, then rerun")
    storage.remove(aside)

  def _beat(self) -> None:
    while not self._stop.wait(HEARTBEAT_S):
      try:
        if self._is_ours(self._holder()):  # never renew a lock another run took over
          storage.touch(self.path)
      except OSError:
        pass

  @staticmethod
  def _is_ours(holder: Optional[dict]) -> bool:
    return bool(holder) and holder.get("pid") == os.getpid() and (
        holder.get("host") == socket.gethostname())

  def release(self) -> None:
    """Gives the lock back (only if it is still ours)."""
    if not self._held:
      return
    self._stop.set()
    if not storage.connection_lost(self.path):  # else a beat may be in the client's retries
      self._heartbeat.join()               # (~30 s), and the removal below fails at once
    self._held = False
    try:
      if self._is_ours(self._holder()):
        storage.remove(self.path)
    except OSError:  # the store went away: the lock expires (same host: at once, its pid is
      pass           # gone; other hosts: after STALE_AFTER_S), the error that ended the run shows

  def __enter__(self):
    return self.acquire()

  def __exit__(self, *exc):
    self.release()


def check_outside(workdir: str, dataset: str) -> None:
  """A workdir inside an image folder's tree would be read as a class of images (and was
  blamed as a class folder without images): refused before anything is created."""
  if storage.is_url(workdir) or not isinstance(dataset, str) or not os.path.isdir(dataset):
    return
  root = os.path.realpath(dataset)
  if os.path.commonpath([root, os.path.realpath(workdir)]) == root:
    raise WorkdirError(f"--workdir={workdir} is inside the dataset folder {dataset}: the "
                       "run's files would be read as images; pick a --workdir outside it")


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


def _unwritable_because(workdir: str) -> Optional[str]:
  """Why a file cannot be created in `workdir` now (a real write, as the run's would be:
  root ignores permission bits, not a read-only mount), or None when one can."""
  try:
    with tempfile.TemporaryFile(dir=workdir):
      return None
  except OSError as e:
    return e.strerror or str(e)


def _paths_named(error: BaseException, workdir: str) -> List[str]:
  """The paths under `workdir` that `error` and the errors it was raised from name."""
  pattern = re.escape(os.path.abspath(workdir)) + r"""[^\s"',:;()\[\]]*"""
  found, seen = [], set()
  while error is not None and id(error) not in seen:  # a chain can loop back on itself
    seen.add(id(error))
    found += [str(error.filename)] if getattr(error, "filename", None) else []
    found += re.findall(pattern, str(error))
    error = error.__cause__ or error.__context__
  return found


@contextlib.contextmanager
def writes_checked(workdir: str, saved_steps: Callable[[], List[int]]):
  """A local workdir that stops taking writes mid-run (its disk turned read-only, its
  permissions were revoked) fails at whatever writes next (orbax, TensorFlow, numpy), each
  with its own traceback and words; this names the cause, the file and the fix in one line.
  `saved_steps`: the complete checkpoints, which a rerun resumes from."""
  try:
    yield
  except Exception as e:  # pylint: disable=broad-except  (any writer may be the first)
    why = None if storage.is_url(workdir) else _unwritable_because(workdir)
    if why is None:
      raise
    paths = _paths_named(e, workdir)
    steps = saved_steps()
    raise WorkdirError(
        f"--workdir={workdir} stopped taking writes mid-run "
        f"({f'writing {paths[0]}: ' if paths else ''}{why}): make it writable again (remount its "
        "disk read-write, or restore its permissions), then rerun the same command to resume "
        f"from {f'the intact checkpoint of step {steps[-1]}' if steps else 'the start'}"
    ) from None
