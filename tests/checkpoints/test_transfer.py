"""URL -> file, atomically, offline (file:// through an injected opener, loopback HTTP)."""

import functools
import http.server
import os
import socket
import threading
import urllib.error

import numpy as np
import pytest

from helpers import serve_from
from vit_jax.checkpoints import transfer

BUCKET_FILE = "gs://vit_models/imagenet21k/ViT-B_16.npz"


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


def test_bucket_file_over_https_atomically_with_progress(tmp_path, npz_file, small_chunks,
                                                         capsys):
  urlopen, asked = serve_from(npz_file)
  dest = str(tmp_path / "ck" / "imagenet21k" / "ViT-B_16.npz")
  assert transfer.fetch(BUCKET_FILE, dest, urlopen=urlopen) == dest
  assert asked == ["https://storage.googleapis.com/vit_models/imagenet21k/ViT-B_16.npz"]
  assert open(dest, "rb").read() == npz_file.read_bytes()
  assert os.listdir(tmp_path / "ck" / "imagenet21k") == ["ViT-B_16.npz"]  # no temporary left
  umask = os.umask(0)
  os.umask(umask)
  assert os.stat(dest).st_mode & 0o777 == 0o666 & ~umask  # readable like any other file
  progress = capsys.readouterr().err
  assert "ViT-B_16.npz" in progress and "100%" in progress and "B/s" in progress


@pytest.fixture
def loopback_server(npz_file):
  """An HTTP server on 127.0.0.1 serving npz_file's folder; yields its base URL."""
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
  with pytest.raises(transfer.DownloadError, match="HTTP 404"):
    transfer.fetch(f"{loopback_server}/nope.npz", str(tmp_path / "ck" / "nope.npz"),
                   verbose=False)
  assert sorted(os.listdir(tmp_path / "ck")) == ["ViT-B_16.npz"]


def closed_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def test_unreachable_url_is_one_clear_error_and_leaves_no_folder(tmp_path):
  url = f"http://127.0.0.1:{closed_port()}/ViT-B_16.npz"
  with pytest.raises(transfer.DownloadError) as error:
    transfer.fetch(url, str(tmp_path / "new" / "family" / "ViT-B_16.npz"), verbose=False)
  assert str(error.value).startswith(f"cannot reach {url}: the network is unreachable")
  assert "\n" not in str(error.value)
  assert os.listdir(tmp_path) == []  # the folders it had to create are gone again


def test_offline_dns_failure_is_one_clear_error(tmp_path):
  def offline(url, timeout):
    raise urllib.error.URLError(socket.gaierror(-3, "Temporary failure in name resolution"))
  with pytest.raises(transfer.DownloadError, match="cannot reach https://storage.googleapis."
                     "com/vit_models/sam/ViT-B_16.npz: the network is unreachable"):
    transfer.fetch("gs://vit_models/sam/ViT-B_16.npz", str(tmp_path / "x.npz"), urlopen=offline,
                   verbose=False)


def test_the_closed_bucket_says_so(tmp_path):
  def forbidden(url, timeout):
    raise urllib.error.HTTPError(url, 403, "Forbidden", {}, None)
  with pytest.raises(transfer.BucketClosed, match="^gs://vit_models refuses anonymous "
                     "downloads since February 2026 \\(HTTP 403 for https://storage"):
    transfer.fetch(BUCKET_FILE, str(tmp_path / "x.npz"), urlopen=forbidden, verbose=False)


def truncated(path, keep):
  """An urlopen whose body stops after `keep` bytes although Content-Length says more."""
  class Response:
    headers = {"Content-Length": str(path.stat().st_size)}

    def __init__(self):
      self.body = open(path, "rb")

    def read(self, size):
      return self.body.read(max(0, min(size, keep - self.body.tell())))

    def __enter__(self):
      return self

    def __exit__(self, *exc):
      self.body.close()
  return lambda url, timeout: Response()


def test_truncated_or_non_npz_downloads_leave_nothing(tmp_path, npz_file):
  dest = tmp_path / "ck" / "imagenet21k"
  dest.mkdir(parents=True)
  with pytest.raises(transfer.DownloadError, match="incomplete: 1000 of"):
    transfer.fetch(BUCKET_FILE, str(dest / "ViT-B_16.npz"), urlopen=truncated(npz_file, 1000),
                   verbose=False)
  html = tmp_path / "login.html"
  html.write_text("<html>please log in</html>")
  with pytest.raises(transfer.DownloadError, match="did not send an .npz file"):
    transfer.fetch(BUCKET_FILE, str(dest / "ViT-B_16.npz"), urlopen=serve_from(html)[0],
                   verbose=False)
  assert os.listdir(dest) == []
