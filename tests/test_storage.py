"""The storage layer, on a local disk and on the Cloud Storage emulator."""

import os
import signal
import subprocess
import sys

import pytest

from vit_jax import storage


def test_write_atomic_replaces_whole_files_with_the_umask_mode_and_no_leftovers(tmp_path):
  path = str(tmp_path / "sub" / "config.json")
  storage.write_atomic(path, "first")
  storage.write_atomic(path, b"second")
  assert storage.read_text(path) == "second"
  assert os.listdir(tmp_path / "sub") == ["config.json"]  # no temporary file left
  umask = os.umask(0)
  os.umask(umask)
  assert os.stat(path).st_mode & 0o777 == 0o666 & ~umask


def test_a_kill_during_write_atomic_leaves_the_old_file(tmp_path):
  """The writer is SIGKILLed while the new content is being written: the old file stays."""
  path = tmp_path / "final_metrics.json"
  path.write_text('{"old": 1}')
  child = subprocess.Popen([sys.executable, "-c", f"""
import os, sys
from vit_jax import storage
real_fsync = os.fsync
def stall(fd):
  print("writing", flush=True)
  sys.stdin.read()  # killed here, after the bytes are written, before the rename
os.fsync = stall
storage.write_atomic({str(path)!r}, "x" * 1000)
"""], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
  assert child.stdout.readline() == "writing\n"
  child.send_signal(signal.SIGKILL)
  child.wait()
  assert path.read_text() == '{"old": 1}'


def test_create_exclusive_creates_once(tmp_path):
  path = str(tmp_path / "run.lock")
  assert storage.create_exclusive(path, "mine")
  assert not storage.create_exclusive(path, "theirs")
  assert storage.read_text(path) == "mine"


def test_listing_moving_and_removing(tmp_path):
  assert storage.listdir(str(tmp_path / "missing")) == []
  storage.write_atomic(str(tmp_path / "a" / "x"), "1")
  storage.move(str(tmp_path / "a"), str(tmp_path / "b" / "a"))
  assert storage.listdir(str(tmp_path / "b")) == ["a"] and storage.isdir(str(tmp_path / "b" / "a"))
  assert not storage.exists(str(tmp_path / "a"))
  storage.remove(str(tmp_path / "b" / "a" / "x"))
  storage.remove(str(tmp_path / "b" / "a" / "x"))  # already gone: fine
  storage.remove_empty_dir(str(tmp_path / "b" / "a"))
  assert storage.listdir(str(tmp_path / "b")) == []
  assert storage.free_bytes(str(tmp_path / "not" / "yet")) > 0
  assert storage.free_bytes("gs://bucket/run") is None


def test_the_same_calls_on_gcs(gcs):
  """Against the emulator: whole-file writes, listing, moving a folder, removing."""
  root = f"gs://{gcs.bucket}/fs"
  storage.write_atomic(f"{root}/a/config.json", "first")
  storage.write_atomic(f"{root}/a/config.json", b"second")
  assert storage.read_text(f"{root}/a/config.json") == "second"
  assert storage.isdir(f"{root}/a") and storage.isfile(f"{root}/a/config.json")
  assert storage.listdir(root) == ["a"] and storage.listdir(f"{root}/missing") == []
  storage.move(f"{root}/a", f"{root}/b/a")
  assert storage.listdir(root) == ["b"] and storage.read_text(f"{root}/b/a/config.json") == "second"
  storage.remove(f"{root}/b/a/config.json")
  storage.remove(f"{root}/b/a/config.json")  # already gone: fine
  assert not storage.exists(f"{root}/b/a/config.json")
  with pytest.raises(ValueError, match="written whole"):
    storage.open_append(f"{root}/metrics.jsonl")


@pytest.mark.parametrize("ending", [b"\r", b"\n", b"\r\n", b"\n--==0==", b""])
def test_binary_files_round_trip_byte_for_byte_on_gcs(gcs, ending):
  """Event files and .npz are binary: any last byte survives the upload (the emulator's
  multipart parser once dropped a final line break; tests/gcs_emulator.py)."""
  path = f"gs://{gcs.bucket}/fs/blob"
  payload = bytes(range(256)) + ending
  storage.write_atomic(path, payload)
  assert storage.read_bytes(path) == payload


def test_create_exclusive_and_generation_preconditions_on_gcs(gcs):
  path = f"gs://{gcs.bucket}/fs/run.lock"
  assert storage.create_exclusive(path, "mine")
  assert not storage.create_exclusive(path, "theirs")
  old = storage.generation(path)
  storage.touch(path)  # a heartbeat: a new generation of the same bytes
  assert storage.generation(path) != old and storage.read_text(path) == "mine"
  storage.remove_generation(path, old)  # judged stale at `old`: the renewed lock survives
  assert storage.read_text(path) == "mine"
  storage.remove_generation(path, storage.generation(path))
  assert not storage.exists(path)
