"""Bytes from a URL into a file that appears only once complete.

`fetch` streams any URL (http(s)://, gs://, file://, ...) through the storage layer's one
client, fsspec, with a progress bar, checks the length, and writes with
storage.atomic_file: the file appears whole or not at all, and a failure leaves neither a
temporary file nor the folders it had to create. The public buckets on
storage.googleapis.com (gs://vit_models, the ImageNet labels) are read over anonymous
HTTPS: no gcloud, no credentials.
"""

import os
import sys
import zipfile
from typing import Iterator, Optional, Tuple

import tqdm

from vit_jax.base import errors, storage, url_clients
from vit_jax.checkpoints import released

CHUNK_BYTES = 1 << 20


class DownloadError(errors.UserError, OSError):
  """A download that failed; the message is one line naming the URL and the cause."""


class BucketClosed(DownloadError):
  """gs://vit_models answered 403: it refuses anonymous downloads since February 2026."""


def one_line(error: BaseException) -> str:
  return " ".join(str(error).split())


def _causes(error: Optional[BaseException]) -> Iterator[BaseException]:
  """The error and those it was raised from: fsspec wraps its HTTP client's."""
  while error is not None:
    yield error
    error = error.__cause__ or error.__context__


def _open_failed(url: str, error: BaseException) -> DownloadError:
  import aiohttp  # pylint: disable=import-outside-toplevel  # fsspec's HTTP client
  for cause in _causes(error):
    if isinstance(cause, aiohttp.ClientResponseError):
      if cause.status == 403 and released.is_bucket_url(url):
        return BucketClosed(f"{released.BUCKET} refuses anonymous downloads since February "
                            f"2026 (HTTP 403 for {url})")
      hint = (" (check the name; checkpoints/README.md lists the families)"
              if cause.status == 404 else "")
      return DownloadError(f"cannot download {url}: HTTP {cause.status} {cause.message}{hint}")
    if isinstance(cause, (aiohttp.ClientConnectionError, TimeoutError)):
      return DownloadError(f"cannot reach {url}: the network is unreachable or the server is "
                           f"down ({one_line(cause)})")
  if isinstance(error, FileNotFoundError):
    return DownloadError(f"cannot download {url}: no such file")
  return DownloadError(f"cannot read {url}: {one_line(error)} (check the URL, your network "
                       "and credentials)")


def _read_all(stream, url: str) -> Iterator[bytes]:
  """Yields the stream's chunks; a failure mid-way becomes a DownloadError naming the URL."""
  with stream:
    try:
      while chunk := stream.read(CHUNK_BYTES):
        yield chunk
    except (OSError, TimeoutError, *storage.client_errors()) as e:
      raise DownloadError(f"download of {url} was interrupted: {one_line(e)}") from None


def _open(url: str) -> Tuple[Optional[int], Iterator[bytes]]:
  """(length or None, chunks) of a URL; the public buckets are read over HTTPS."""
  url = released.https_url(url) if released.is_public(url) else url
  try:
    fs, key = url_clients.url_filesystem(url)
    length = fs.size(key)
    # http(s): one streamed GET (block_size 0), which needs no Range support from servers.
    stream = fs.open(key, "rb", **({"block_size": 0} if url.startswith("http") else {}))
  except (OSError, TimeoutError, *storage.client_errors()) as e:
    raise _open_failed(url, e) from None
  return length, _read_all(stream, url)


def _copy(url: str, out, *, label: str, verbose: bool) -> None:
  """Streams url into `out` with a progress bar (bytes, rate, ETA); checks the length."""
  total, chunks = _open(url)
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


def fetch(url: str, dest: str, *, verbose: bool = True) -> str:
  """Copies `url` to `dest` atomically and returns dest; raises DownloadError."""
  with storage.atomic_file(dest) as out:
    _copy(url, out, label=os.path.basename(dest), verbose=verbose)
    size = out.tell()
    if dest.endswith(".npz") and not zipfile.is_zipfile(out):
      raise DownloadError(f"{url} did not send an .npz file ({size} bytes of something "
                          "else: a proxy or login page?)")
  return dest
