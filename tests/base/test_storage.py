"""The storage layer, on a local disk and on the Cloud Storage emulator."""

import ast
import os
import pathlib
import signal
import subprocess
import sys

import jax
import numpy as np
import pytest

from conftest import REPO, init_params, tiny_model
from vit_jax import load_npz, predict, read_class_names, save_npz
from vit_jax.base import storage, url_clients

# Where a file is opened other than through vit_jax.base.storage, and why.
NOT_THROUGH_STORAGE = {
    "vit_jax/base/storage.py": "the storage layer itself",
    "vit_jax/base/platforms.py": "reads /sys (the PCI bus), a kernel interface, not a file of data",
    "vit_jax/training/runs/workdir.py": "reads /proc (a lock holder's start time), a kernel interface",
    "vit_jax/models/memory_fit.py": "reads /proc/meminfo (the host's free memory), a kernel interface",
}


def test_write_atomic_replaces_whole_files_with_the_umask_mode_and_no_leftovers(tmp_path):
  path = str(tmp_path / "sub" / "config.json")
  storage.write_atomic(path, "first")
  storage.write_atomic(path, b"second")
  assert storage.read_text(path) == "second"
  assert os.listdir(tmp_path / "sub") == ["config.json"]  # no temporary file left
  umask = os.umask(0)
  os.umask(umask)
  assert os.stat(path).st_mode & 0o777 == 0o666 & ~umask


def test_atomic_file_leaves_neither_temporary_file_nor_new_folders(tmp_path):
  dest = tmp_path / "a" / "b" / "f.npz"
  with pytest.raises(RuntimeError):
    with storage.atomic_file(str(dest)) as out:
      out.write(b"partial")
      raise RuntimeError("disk full")
  assert os.listdir(tmp_path) == []


def test_a_kill_during_write_atomic_leaves_the_old_file(tmp_path):
  """The writer is SIGKILLed while the new content is being written: the old file stays."""
  path = tmp_path / "final_metrics.json"
  path.write_text('{"old": 1}')
  child = subprocess.Popen([sys.executable, "-c", f"""
import os, sys
from vit_jax.base import storage
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
  with pytest.raises(RuntimeError):
    with storage.atomic_file(f"{root}/streamed.npz") as out:
      out.write(b"partial")
      raise RuntimeError("connection lost")
  assert not storage.exists(f"{root}/streamed.npz")  # nothing uploaded
  with storage.atomic_file(f"{root}/streamed.npz") as out:
    out.write(b"whole")
  assert storage.read_bytes(f"{root}/streamed.npz") == b"whole"


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


def test_a_checkpoint_its_class_names_and_a_labels_file_load_from_gs(gcs, tmp_path):
  """load_npz, read_class_names and predict's --labels read gs:// through the storage layer
  (the client the emulator serves), the same bytes as from a local disk."""
  params = init_params(tiny_model(num_classes=3))
  names = ["cat", "dog", "émeu"]
  url, labels = f"gs://{gcs.bucket}/run/params.npz", f"gs://{gcs.bucket}/labels.txt"
  save_npz(params, url, class_names=names)
  save_npz(params, str(tmp_path / "params.npz"), class_names=names)
  storage.write_atomic(labels, "".join(f"{name}\n" for name in names))
  _, loaded = load_npz(url)
  _, local = load_npz(str(tmp_path / "params.npz"))
  assert all(jax.tree.leaves(jax.tree.map(np.array_equal, loaded, local)))
  assert read_class_names(url) == names and predict.read_labels(labels) == names
  with pytest.raises(FileNotFoundError, match=f"^checkpoint not found: gs://{gcs.bucket}/no"):
    load_npz(f"gs://{gcs.bucket}/no.npz")


def file_access_outside_storage(path: pathlib.Path) -> list:
  """Calls of the builtin open() and of anything under `gfile` in a module's code (not
  its docstrings), as 'line: call'."""
  found = []
  for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
    if isinstance(node, ast.Call):
      name = ast.unparse(node.func)
      if name == "open" or "gfile" in name.split("."):
        found.append(f"{node.lineno}: {name}(...)")
  return found


def test_a_url_without_its_client_says_what_to_install_first():
  """Not "lost the connection ...": nothing was connected; the fix leads the line."""
  try:
    import s3fs  # pylint: disable=import-outside-toplevel,unused-import
    pytest.skip("s3fs is installed here")
  except ImportError:
    pass
  for call in (storage.read_bytes, storage.exists):
    with pytest.raises(url_clients.UnsupportedURL) as caught:
      call("s3://bucket/model.npz")
    assert str(caught.value) == "s3:// needs s3fs: pip install s3fs"
  assert not storage.connection_lost("s3://bucket/model.npz")
  with pytest.raises(url_clients.UnsupportedURL, match="^nosuch:// is not a storage scheme this "
                     "installation knows .*: use a local path, gs:// or http"):
    storage.read_bytes("nosuch://x/y")


def test_files_are_opened_only_through_the_storage_layer():
  """A reader that opens files itself skips what the storage layer guarantees (gs://
  through the client the emulator tests, atomic writes, one-line errors)."""
  package = pathlib.Path(REPO)
  opened = {str(path.relative_to(package)): calls
            for path in sorted((package / "vit_jax").rglob("*.py"))
            if (calls := file_access_outside_storage(path))}
  assert set(opened) == set(NOT_THROUGH_STORAGE), opened
