"""Released checkpoint names -> URLs, and the downloader, offline (file:// and loopback HTTP)."""

import functools
import http.server
import os
import socket
import subprocess
import sys
import threading
import urllib.error
import urllib.request

import numpy as np
import pytest

from conftest import REPO
from helpers import serve_from
from vit_jax import download
from vit_jax.checkpoints import released
from vit_jax.models import zoo

B16 = "B_16-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.0-sd_0.0"


@pytest.mark.parametrize("name,url", [
    ("ViT-B_16", "gs://vit_models/imagenet21k/ViT-B_16.npz"),
    ("b_16", "gs://vit_models/imagenet21k/ViT-B_16.npz"),
    ("ViT-B/16", "gs://vit_models/imagenet21k/ViT-B_16.npz"),  # the paper's notation
    ("R50+ViT-B_16", "gs://vit_models/imagenet21k/R50+ViT-B_16.npz"),
    ("Ti_16",
     "gs://vit_models/augreg/Ti_16-i21k-300ep-lr_0.001-aug_none-wd_0.03-do_0.0-sd_0.0.npz"),
    ("imagenet21k/vit-l_16", "gs://vit_models/imagenet21k/ViT-L_16.npz"),
    ("imagenet21k+imagenet2012/ViT-L_16-224",
     "gs://vit_models/imagenet21k+imagenet2012/ViT-L_16-224.npz"),
    (f"augreg/{B16.lower()}.npz", f"gs://vit_models/augreg/{B16}.npz"),
    (f"augreg/{B16}--imagenet2012-steps_20k-lr_0.01-res_384",
     f"gs://vit_models/augreg/{B16}--imagenet2012-steps_20k-lr_0.01-res_384.npz"),
    ("sam/ViT-B_32", "gs://vit_models/sam/ViT-B_32.npz"),
    ("gsam/ViT-S_16", "gs://vit_models/gsam/ViT-S_16.npz"),
    ("gs://my-bucket/ft.npz", "gs://my-bucket/ft.npz"),
    ("https://example.com/x.npz", "https://example.com/x.npz"),
    ("missing/local.npz", "missing/local.npz"),  # load_npz reports it as missing
])
def test_resolve_names_and_urls(name, url, tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)
  assert released.resolve(name) == url


def test_every_released_model_but_the_gap_ones_has_an_i21k_start():
  for name in zoo.RELEASED:  # the model configs' default config.pretrained
    if "gap" not in name:
      assert released.resolve(name, local_dir=None).startswith("gs://vit_models/")


def test_resolve_keeps_existing_local_paths_and_prefers_downloaded_copies(tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)
  (tmp_path / "mine.npz").write_bytes(b"x")
  assert released.resolve("mine.npz") == "mine.npz"
  assert released.resolve(str(tmp_path / "mine.npz")) == str(tmp_path / "mine.npz")
  local = tmp_path / "checkpoints" / "imagenet21k" / "ViT-B_16.npz"
  local.parent.mkdir(parents=True)
  local.write_bytes(b"x")
  assert released.resolve("ViT-B_16") == os.path.join("checkpoints", "imagenet21k", "ViT-B_16.npz")
  assert released.resolve("ViT-B_16", local_dir=None).startswith("gs://")


@pytest.mark.parametrize("name,message", [
    ("foo/ViT-B_16", "unknown checkpoint family 'foo'; families: imagenet21k, "
                     "imagenet21k+imagenet2012, augreg, sam, gsam"),
    ("ViT-Q_16", "unknown model name"),
    ("ViT-B_16-gap-norep", "no released ImageNet-21k checkpoint is known for ViT-B_16-gap-norep"),
])
def test_resolve_errors_are_one_line(name, message):
  with pytest.raises(ValueError, match="^[^\n]*$") as error:
    released.resolve(name)
  assert message in str(error.value)


def test_https_url_and_local_path():
  url = "gs://vit_models/imagenet21k+imagenet2012/R50+ViT-B_16.npz"
  assert released.https_url(url) == (
      "https://storage.googleapis.com/vit_models/imagenet21k+imagenet2012/R50+ViT-B_16.npz")
  assert released.https_url("/local/file.npz") == "/local/file.npz"
  for same in (url, released.https_url(url)):
    assert released.local_path(same, "ck") == os.path.join(
        "ck", "imagenet21k+imagenet2012", "R50+ViT-B_16.npz")
  assert released.local_path("https://example.com/a/b/c.npz", "ck") == os.path.join("ck", "c.npz")


@pytest.fixture
def npz_file(tmp_path):
  """A small real .npz (several chunks with a 64 KiB chunk size)."""
  path = tmp_path / "source" / "ViT-B_16.npz"
  path.parent.mkdir()
  np.savez(path, w=np.arange(100_000, dtype=np.float32))
  return path


@pytest.fixture
def small_chunks(monkeypatch):
  monkeypatch.setattr(download, "CHUNK_BYTES", 1 << 16)



def test_download_released_name_over_https_atomically(tmp_path, npz_file, small_chunks, capsys):
  urlopen, asked = serve_from(npz_file)
  path = download.download("imagenet21k/ViT-B_16", str(tmp_path / "ck"), urlopen=urlopen)
  assert asked == ["https://storage.googleapis.com/vit_models/imagenet21k/ViT-B_16.npz"]
  assert path == str(tmp_path / "ck" / "imagenet21k" / "ViT-B_16.npz")
  assert open(path, "rb").read() == npz_file.read_bytes()
  assert os.listdir(tmp_path / "ck" / "imagenet21k") == ["ViT-B_16.npz"]  # no temporary left
  umask = os.umask(0)
  os.umask(umask)
  assert os.stat(path).st_mode & 0o777 == 0o666 & ~umask  # readable like any other file
  progress = capsys.readouterr().err
  assert "ViT-B_16.npz" in progress and "100%" in progress and "B/s" in progress

  assert download.download("imagenet21k/ViT-B_16", str(tmp_path / "ck"), urlopen=urlopen) == path
  assert len(asked) == 1  # a complete file is not fetched again ...
  download.download("imagenet21k/ViT-B_16", str(tmp_path / "ck"), urlopen=urlopen, force=True)
  assert len(asked) == 2  # ... unless forced


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


def test_download_from_loopback_http(tmp_path, npz_file, loopback_server, small_chunks):
  path = download.download(f"{loopback_server}/ViT-B_16.npz", str(tmp_path / "ck"), verbose=False)
  assert path == str(tmp_path / "ck" / "ViT-B_16.npz")
  assert open(path, "rb").read() == npz_file.read_bytes()

  with pytest.raises(download.DownloadError, match="HTTP 404"):
    download.download(f"{loopback_server}/nope.npz", str(tmp_path / "ck"), verbose=False)
  assert sorted(os.listdir(tmp_path / "ck")) == ["ViT-B_16.npz"]


def closed_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def test_unreachable_url_is_one_clear_error(tmp_path):
  url = f"http://127.0.0.1:{closed_port()}/ViT-B_16.npz"
  with pytest.raises(download.DownloadError) as error:
    download.download(url, str(tmp_path), verbose=False)
  assert str(error.value).startswith(f"cannot reach {url}: the network is unreachable")
  assert "\n" not in str(error.value)
  assert os.listdir(tmp_path) == []


def test_offline_dns_failure_is_one_clear_error(tmp_path):
  def offline(url, timeout):
    raise urllib.error.URLError(socket.gaierror(-3, "Temporary failure in name resolution"))
  with pytest.raises(download.DownloadError, match="cannot reach https://storage.googleapis.com/"
                     "vit_models/sam/ViT-B_16.npz: the network is unreachable"):
    download.download("sam/ViT-B_16", str(tmp_path), urlopen=offline, verbose=False)


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
  dest = tmp_path / "ck"
  with pytest.raises(download.DownloadError, match="incomplete: 1000 of"):
    download.download("imagenet21k/ViT-B_16", str(dest), urlopen=truncated(npz_file, 1000),
                      verbose=False)
  html = tmp_path / "login.html"
  html.write_text("<html>please log in</html>")
  with pytest.raises(download.DownloadError, match="did not send an .npz file"):
    download.download("imagenet21k/ViT-B_16", str(dest), urlopen=serve_from(html)[0],
                      verbose=False)
  assert os.listdir(dest / "imagenet21k") == []


def run_download(*args, cwd):
  return subprocess.run([sys.executable, "-m", "vit_jax.download", *args], cwd=cwd,
                        env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True,
                        text=True, timeout=60)


def test_download_command(tmp_path, npz_file):
  done = run_download(npz_file.as_uri(), "--dir", str(tmp_path / "ck"), cwd=tmp_path)
  assert done.returncode == 0, done.stderr
  assert done.stdout.strip() == str(tmp_path / "ck" / "ViT-B_16.npz")
  assert (tmp_path / "ck" / "ViT-B_16.npz").read_bytes() == npz_file.read_bytes()

  failed = run_download("nonsense/ViT-B_16", cwd=tmp_path)
  assert failed.returncode == 1
  assert failed.stderr.strip().splitlines()[-1].startswith("error: 'nonsense/ViT-B_16' is ")
  assert "Traceback" not in failed.stderr
