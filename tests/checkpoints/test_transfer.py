"""URL -> file, atomically, against real servers on 127.0.0.1: a plain HTTP server, and
the bucket stand-in of tests/hub_server.py as the storage host (STORAGE_EMULATOR_HOST)."""

import functools
import http.server
import os
import threading

import numpy as np
import pytest

from helpers import closed_port
from hub_server import HubServer
from vit_jax.checkpoints import released, transfer

BUCKET_FILE = "gs://vit_models/imagenet21k/ViT-B_16.npz"
BUCKET_PATH = "/vit_models/imagenet21k/ViT-B_16.npz"


@pytest.fixture
def npz_file(tmp_path):
  """A small real .npz (several chunks with a 64 KiB chunk size)."""
  path = tmp_path / "source" / "ViT-B_16.npz"
  path.parent.mkdir()
  np.savez(path, w=np.arange(100_000, dtype=np.float32))
  return path


@pytest.fixture
def small_chunks(monkeypatch):
  monkeypatch.setattr(transfer, "CHUNK_BYTES", 1 << 16)


@pytest.fixture
def bucket(monkeypatch):
  """The public bucket's HTTPS host, on 127.0.0.1."""
  server = HubServer()
  monkeypatch.setenv(released.EMULATOR_ENV, server.url)
  yield server
  server.close()


def test_bucket_file_over_https_atomically_with_progress(tmp_path, npz_file, bucket,
                                                         small_chunks, capsys):
  bucket.files[BUCKET_PATH] = npz_file.read_bytes()
  dest = str(tmp_path / "ck" / "imagenet21k" / "ViT-B_16.npz")
  assert transfer.fetch(BUCKET_FILE, dest) == dest
  assert f"GET {BUCKET_PATH}" in bucket.requests  # anonymous HTTPS, not the gs:// client
  assert open(dest, "rb").read() == npz_file.read_bytes()
  assert os.listdir(tmp_path / "ck" / "imagenet21k") == ["ViT-B_16.npz"]  # no temporary left
  umask = os.umask(0)
  os.umask(umask)
  assert os.stat(dest).st_mode & 0o777 == 0o666 & ~umask  # readable like any other file
  progress = capsys.readouterr().err
  assert "ViT-B_16.npz" in progress and "100%" in progress and "B/s" in progress


@pytest.fixture
def loopback_server(npz_file):
  """Python's own HTTP server (no Range requests) on 127.0.0.1 serving npz_file's folder."""
  handler = functools.partial(http.server.SimpleHTTPRequestHandler,
                              directory=str(npz_file.parent))
  handler.log_message = lambda *args: None
  server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
  thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
  thread.start()
  yield f"http://127.0.0.1:{server.server_address[1]}"
  server.shutdown()
  thread.join()


def test_loopback_http_and_a_404(tmp_path, npz_file, loopback_server, small_chunks):
  dest = str(tmp_path / "ck" / "ViT-B_16.npz")
  transfer.fetch(f"{loopback_server}/ViT-B_16.npz", dest, verbose=False)
  assert open(dest, "rb").read() == npz_file.read_bytes()
  with pytest.raises(transfer.DownloadError, match="HTTP 404 File not found"):
    transfer.fetch(f"{loopback_server}/nope.npz", str(tmp_path / "ck" / "nope.npz"),
                   verbose=False)
  assert sorted(os.listdir(tmp_path / "ck")) == ["ViT-B_16.npz"]


def test_unreachable_url_is_one_clear_error_and_leaves_no_folder(tmp_path):
  url = f"http://127.0.0.1:{closed_port()}/ViT-B_16.npz"
  with pytest.raises(transfer.DownloadError) as error:
    transfer.fetch(url, str(tmp_path / "new" / "family" / "ViT-B_16.npz"), verbose=False)
  assert str(error.value).startswith(f"cannot reach {url}: the network is unreachable")
  assert "\n" not in str(error.value)
  assert os.listdir(tmp_path) == []  # the folders it had to create are gone again


def test_the_closed_bucket_says_so(tmp_path, bucket, monkeypatch):
  monkeypatch.setattr(bucket.server, "forbid", True)
  with pytest.raises(transfer.BucketClosed, match="^gs://vit_models refuses anonymous "
                     f"downloads since February 2026 \\(HTTP 403 for {bucket.url}"):
    transfer.fetch(BUCKET_FILE, str(tmp_path / "x.npz"), verbose=False)


def test_truncated_or_non_npz_downloads_leave_nothing(tmp_path, npz_file, bucket):
  dest = tmp_path / "ck" / "imagenet21k"
  dest.mkdir(parents=True)
  bucket.files[BUCKET_PATH] = npz_file.read_bytes()
  bucket.tamper[BUCKET_PATH] = "truncated"  # the connection closes half-way
  with pytest.raises(transfer.DownloadError, match=f"^download of {bucket.url}{BUCKET_PATH} "
                     "was interrupted: .*not completed"):
    transfer.fetch(BUCKET_FILE, str(dest / "ViT-B_16.npz"), verbose=False)
  bucket.tamper.clear()
  bucket.files[BUCKET_PATH] = b"<html>please log in</html>"
  with pytest.raises(transfer.DownloadError, match="did not send an .npz file"):
    transfer.fetch(BUCKET_FILE, str(dest / "ViT-B_16.npz"), verbose=False)
  assert os.listdir(dest) == []
