"""The workdir: usable-or-refused up front, and one job at a time (a real second process)."""

import json
import os
import socket
import subprocess
import sys
import time

import pytest

from vit_jax.base import storage, workdir_files
from vit_jax.training.runs import workdir

HOLD_LOCK = """
import sys, time
from vit_jax.training.runs import workdir
lock = workdir.WorkdirLock(sys.argv[1]).acquire()
print("held", flush=True)
time.sleep(120)
"""


def test_a_file_is_not_a_workdir(tmp_path):
  path = tmp_path / "results.txt"
  path.write_text("keep me")
  with pytest.raises(workdir.WorkdirError, match="is a file, not a directory") as e:
    workdir.prepare(str(path))
  assert "\n" not in str(e.value)
  assert path.read_text() == "keep me"


def test_a_workdir_that_cannot_be_created(tmp_path):
  (tmp_path / "file").write_text("")
  with pytest.raises(workdir.WorkdirError, match="cannot create --workdir=.*pick a location"):
    workdir.prepare(str(tmp_path / "file" / "run"))


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write anywhere")
def test_a_read_only_workdir(tmp_path):
  tmp_path.chmod(0o500)
  try:
    with pytest.raises(workdir.WorkdirError, match="not writable"):
      workdir.prepare(str(tmp_path))
  finally:
    tmp_path.chmod(0o700)


def test_prepare_reports_whether_it_created_the_directory(tmp_path):
  assert workdir.prepare(str(tmp_path / "new")) is True
  assert workdir.prepare(str(tmp_path / "new")) is False


def test_a_live_holder_in_another_process_is_refused_with_host_and_pid(tmp_path):
  holder = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(tmp_path)],
                            stdout=subprocess.PIPE, text=True)
  try:
    assert holder.stdout.readline().strip() == "held"
    with pytest.raises(workdir.WorkdirError) as e:
      workdir.WorkdirLock(str(tmp_path)).acquire()
    message = str(e.value)
    assert "in use by another run" in message and "\n" not in message
    assert f"host {socket.gethostname()}, pid {holder.pid}" in message
  finally:
    holder.kill()
    holder.wait()
  # SIGKILL left the lock behind: it is stale (its pid is gone) and is taken over.
  assert json.loads((tmp_path / workdir_files.LOCK).read_text())["pid"] == holder.pid
  with workdir.WorkdirLock(str(tmp_path)):
    assert json.loads((tmp_path / workdir_files.LOCK).read_text())["pid"] == os.getpid()
  assert not (tmp_path / workdir_files.LOCK).exists()  # released


def test_staleness_rules():
  now = time.time()
  here = socket.gethostname()
  assert not workdir.WorkdirLock.is_stale({"host": here, "pid": os.getpid(), "started": now})
  # A pid that is alive but started after the lock was written was reused.
  assert workdir.WorkdirLock.is_stale({"host": here, "pid": os.getpid(), "started": 1.0})
  other = {"host": "other-host", "pid": 1, "started": now - 1000}
  assert not workdir.WorkdirLock.is_stale({**other, "heartbeat": now - 10}, now)
  assert workdir.WorkdirLock.is_stale(
      {**other, "heartbeat": now - workdir.STALE_AFTER_S - 1}, now)


def test_a_half_written_lock_of_a_dead_holder_expires_by_its_age(tmp_path):
  lock = tmp_path / workdir_files.LOCK
  lock.write_text("{")
  with pytest.raises(workdir.WorkdirError):
    workdir.WorkdirLock(str(tmp_path)).acquire()
  old = time.time() - workdir.STALE_AFTER_S - 5
  os.utime(lock, (old, old))
  workdir.WorkdirLock(str(tmp_path)).acquire().release()


def test_an_empty_lock_is_described_and_taken_over_within_seconds(tmp_path):
  """What a run leaves when its disk turns read-only as it creates the lock: 0 bytes."""
  lock = tmp_path / workdir_files.LOCK
  lock.write_bytes(b"")
  with pytest.raises(workdir.WorkdirError, match="in use by another run \\(a lock written at "
                     ".* that names no holder; it is taken over 10 s after it was written\\)"):
    workdir.WorkdirLock(str(tmp_path)).acquire()
  old = time.time() - workdir.UNREADABLE_AFTER_S - 1
  os.utime(lock, (old, old))
  workdir.WorkdirLock(str(tmp_path)).acquire().release()


def test_a_stale_lock_that_cannot_be_moved_aside_is_named_not_retried(tmp_path, monkeypatch):
  """storage.move returns what an object store could not move: the lock still there is
  named (not 'other runs keep taking it' after retries that find it again)."""
  lock = tmp_path / workdir_files.LOCK
  lock.write_bytes(b"")
  old = time.time() - workdir.UNREADABLE_AFTER_S - 1
  os.utime(lock, (old, old))
  moves = []
  monkeypatch.setattr(storage, "move", lambda source, dest: moves.append(source) or [source])
  with pytest.raises(workdir.WorkdirError, match=(
      f"^could not move the stale lock {lock} aside \\({lock} left in place\\): delete it, "
      "then rerun$")):
    workdir.WorkdirLock(str(tmp_path)).acquire()
  assert moves == [str(lock)] and lock.exists()


def test_a_workdir_path_too_long_for_the_files_inside_is_refused_before_it_is_made(tmp_path):
  deep = tmp_path.joinpath(*["d" * 200] * 20)  # ~4,000 characters, each name allowed
  with pytest.raises(workdir.WorkdirError, match="characters long; the files a run writes "
                     "inside it need up to 200 more, and paths are limited to 4096"):
    workdir.prepare(str(deep))
  assert os.listdir(tmp_path) == []


def test_a_workdir_inside_the_image_folder_is_refused(tmp_path):
  (tmp_path / "data" / "train").mkdir(parents=True)
  with pytest.raises(workdir.WorkdirError, match="is inside the dataset folder"):
    workdir.check_outside(str(tmp_path / "data" / "train" / "run1"), str(tmp_path / "data"))
  workdir.check_outside(str(tmp_path / "data-run"), str(tmp_path / "data"))  # a sibling


@pytest.mark.parametrize("url, message", [
    ("memory://x/run", "memory:// cannot hold a run (its checkpoints and lock); pass a local "
     "path or a gs://BUCKET/PATH URL"),
    ("http://example.com/run", "http:// cannot hold a run"),
    ("s3://bucket/run", "s3:// cannot hold a run"),
    ("file://host/run", "a file:// URL names a local path, file:///PATH (three slashes)"),
])
def test_a_workdir_url_of_another_scheme_is_refused_in_one_line(url, message):
  with pytest.raises(workdir.WorkdirError) as caught:
    workdir.resolve(url)
  assert str(caught.value).startswith(f"--workdir={url}: {message}")
  assert "\n" not in str(caught.value)


def test_a_file_url_workdir_is_its_local_path(tmp_path):
  assert workdir.resolve(f"file://{tmp_path}/run") == f"{tmp_path}/run"
  assert workdir.resolve(f"file://localhost{tmp_path}") == str(tmp_path)
  assert workdir.resolve("gs://bucket/run") == "gs://bucket/run"
  assert workdir.resolve("runs/a") == "runs/a"


def test_gcs_workdirs_lock_like_local_ones(gcs):
  """On the emulator: a missing bucket and an object as workdir are one line; the lock
  refuses a live holder with its host and pid and is taken over from a dead one."""
  with pytest.raises(workdir.WorkdirError, match="the bucket gs://no-such-bucket does not"):
    workdir.prepare("gs://no-such-bucket/run")
  root = f"gs://{gcs.bucket}/locks"
  assert workdir.prepare(root)  # nothing there yet
  lock = workdir.WorkdirLock(root).acquire()
  with pytest.raises(workdir.WorkdirError, match=f"in use by another run .*pid {os.getpid()},"):
    workdir.WorkdirLock(root).acquire()
  lock.release()
  assert not storage.exists(f"{root}/{workdir_files.LOCK}")
  dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                        capture_output=True, text=True, check=True).stdout.strip()
  storage.write_atomic(f"{root}/{workdir_files.LOCK}", json.dumps(
      {"host": socket.gethostname(), "pid": int(dead), "started": time.time() - 5}))
  workdir.WorkdirLock(root).acquire().release()  # a dead holder on this host: taken over
  storage.write_atomic(f"{root}/results.txt", "keep me")
  with pytest.raises(workdir.WorkdirError, match="is an object, not a folder"):
    workdir.prepare(f"{root}/results.txt")
