"""Bytes from a URL into a file that appears only once complete.

`fetch` streams http(s):// and file:// URLs with urllib (the public gs://vit_models bucket
over HTTPS: no gcloud needed) and other schemes (gs://, s3://, ...) with tf.io.gfile, with a
progress bar, and checks the length. `atomic_file` is the one way this package's
checkpoint fetchers write: a temporary file beside the target, renamed over it when
complete, and on any failure neither the temporary file nor the folders it had to create
are left behind.
"""

import contextlib
import os
import sys
import urllib.error
import urllib.parse
import urllib.request
import uuid
import zipfile
from typing import Callable, Iterator, Optional, Tuple

import tqdm

from vit_jax import errors
from vit_jax.checkpoints import released

CHUNK_BYTES = 1 << 20
TIMEOUT_S = 60  # per blocking network operation, not for the whole download
URL_SCHEMES = ("http", "https", "file")  # what urllib opens; other schemes go to tf.io.gfile

UrlOpener = Callable[..., object]  # urllib.request.urlopen's signature: (url, timeout=...)


class DownloadError(errors.UserError, OSError):
  """A download that failed; the message is one line naming the URL and the cause."""


class BucketClosed(DownloadError):
  """gs://vit_models answered 403: it refuses anonymous downloads since February 2026."""


def one_line(error: BaseException) -> str:
  return " ".join(str(error).split())


def _missing_folders(directory: str) -> list:
  """The folders os.makedirs(directory) would create, deepest first."""
  missing = []
  while directory and not os.path.exists(directory):
    missing.append(directory)
    parent = os.path.dirname(directory)
    if parent == directory:
      break
    directory = parent
  return missing


@contextlib.contextmanager
def atomic_file(dest: str):
  """Yields a binary file whose bytes replace `dest` when the block ends without error.

  The temporary file is not mkstemp's (its 0600 mode would stay on the result): it is
  created with open(..., 'x'), which follows the umask.
  """
  directory = os.path.dirname(os.path.abspath(dest))
  created = _missing_folders(directory)
  os.makedirs(directory, exist_ok=True)
  tmp = os.path.join(directory, f".{os.path.basename(dest)}.{uuid.uuid4().hex[:8]}.part")
  try:
    with open(tmp, "xb") as out:
      yield out
    os.replace(tmp, dest)
  except BaseException:
    if os.path.exists(tmp):
      os.unlink(tmp)
    for folder in created:  # deepest first; stops at one that something else filled
      try:
        os.rmdir(folder)
      except OSError:
        break
    raise


def _read_all(stream, url: str, errors) -> Iterator[bytes]:
  """Yields the stream's chunks; a failure mid-way becomes a DownloadError naming the URL."""
  with stream:
    try:
      while chunk := stream.read(CHUNK_BYTES):
        yield chunk
    except errors as e:
      raise DownloadError(f"download of {url} was interrupted: {one_line(e)}") from None


def _open_url(url: str, urlopen: UrlOpener) -> Tuple[Optional[int], Iterator[bytes]]:
  try:
    response = urlopen(url, timeout=TIMEOUT_S)
  except urllib.error.HTTPError as e:
    if e.code == 403 and released.is_bucket_url(url):
      raise BucketClosed(f"{released.BUCKET} refuses anonymous downloads since February 2026 "
                         f"(HTTP 403 for {url})") from None
    hint = " (check the name; checkpoints/README.md lists the families)" if e.code == 404 else ""
    raise DownloadError(f"cannot download {url}: HTTP {e.code} {e.reason}{hint}") from None
  except urllib.error.URLError as e:
    raise DownloadError(f"cannot reach {url}: the network is unreachable or the server is down "
                        f"({one_line(e.reason)})") from None
  except OSError as e:  # e.g. a timeout before the headers arrive
    raise DownloadError(f"cannot reach {url}: {one_line(e)}") from None
  length = response.headers.get("Content-Length")
  return (int(length) if length else None), _read_all(response, url, OSError)


def _open_gfile(url: str) -> Tuple[Optional[int], Iterator[bytes]]:
  import tensorflow as tf  # only non-HTTP URLs need it; it costs seconds to import.
  try:
    length = tf.io.gfile.stat(url).length
    stream = tf.io.gfile.GFile(url, "rb")
  except tf.errors.NotFoundError:
    raise DownloadError(f"cannot download {url}: no such file") from None
  except tf.errors.OpError as e:
    raise DownloadError(f"cannot read {url}: {one_line(e.message)} (check the URL, your "
                        "network and credentials)") from None
  return length, _read_all(stream, url, tf.errors.OpError)


def _open(url: str, urlopen: UrlOpener) -> Tuple[Optional[int], Iterator[bytes]]:
  """(length or None, chunks) of a URL; the public bucket is read over HTTPS."""
  if url.startswith(released.BUCKET + "/"):
    url = released.https_url(url)
  if urllib.parse.urlparse(url).scheme in URL_SCHEMES:
    return _open_url(url, urlopen)
  return _open_gfile(url)


def _copy(url: str, out, urlopen: UrlOpener, *, label: str, verbose: bool) -> None:
  """Streams url into `out` with a progress bar (bytes, rate, ETA); checks the length."""
  total, chunks = _open(url, urlopen)
  copied = 0
  with tqdm.tqdm(total=total, unit="B", unit_scale=True, unit_divisor=1024, desc=label,
                 disable=not verbose, file=sys.stderr) as bar:
    for chunk in chunks:
      out.write(chunk)
      copied += len(chunk)
      bar.update(len(chunk))
  if total is not None and copied != total:
    raise DownloadError(f"download of {url} is incomplete: {copied} of {total} bytes (the "
                        "connection dropped?): run again")


def fetch(url: str, dest: str, *, urlopen: UrlOpener = urllib.request.urlopen,
          verbose: bool = True) -> str:
  """Copies `url` to `dest` atomically and returns dest; raises DownloadError."""
  with atomic_file(dest) as out:
    _copy(url, out, urlopen, label=os.path.basename(dest), verbose=verbose)
    out.flush()
    if dest.endswith(".npz") and not zipfile.is_zipfile(out.name):
      raise DownloadError(f"{url} did not send an .npz file ({out.tell()} bytes of something "
                          "else: a proxy or login page?)")
  return dest
