"""Fetches one released checkpoint: python -m vit_jax.download NAME_OR_URL [--dir=checkpoints].

NAME_OR_URL is anything `released.resolve` accepts: `imagenet21k/ViT-B_16`,
`augreg/B_16-i21k-300ep-...`, a bare model name (`ViT-B_16`) or a URL. The file lands in
DIR/FAMILY/FILE.npz, where `resolve` (and so --checkpoint and config.pretrained) finds it.
Files of the public gs://vit_models bucket come over HTTPS, so no gcloud is needed; other
gs:// (or s3://, hdfs://) URLs are read with tf.io.gfile. Bytes go to a temporary file that
is renamed only once complete: an interrupted run never leaves a truncated checkpoint
under the final name.
"""

import os
import sys
import urllib.error
import urllib.parse
import urllib.request
import uuid
import zipfile
from typing import Callable, Iterator, Optional, Tuple

import tqdm
from absl import flags

from vit_jax import cli, errors
from vit_jax.checkpoints import released

CHUNK_BYTES = 1 << 20
TIMEOUT_S = 60  # per blocking network operation, not for the whole download
URL_SCHEMES = ("http", "https", "file")  # what urllib opens; other schemes go to tf.io.gfile

UrlOpener = Callable[..., object]  # urllib.request.urlopen's signature: (url, timeout=...)


class DownloadError(errors.UserError, OSError):
  """A download that failed; the message is one line naming the URL and the cause."""


def _read_all(stream, url: str, errors) -> Iterator[bytes]:
  """Yields the stream's chunks; a failure mid-way becomes a DownloadError naming the URL."""
  with stream:
    try:
      while chunk := stream.read(CHUNK_BYTES):
        yield chunk
    except errors as e:
      raise DownloadError(f"download of {url} was interrupted: {cli.one_line(e)}") from None


def _open_url(url: str, urlopen: UrlOpener) -> Tuple[Optional[int], Iterator[bytes]]:
  try:
    response = urlopen(url, timeout=TIMEOUT_S)
  except urllib.error.HTTPError as e:
    hint = " (check the name; checkpoints/README.md lists the families)" if e.code == 404 else ""
    raise DownloadError(f"cannot download {url}: HTTP {e.code} {e.reason}{hint}") from None
  except urllib.error.URLError as e:
    raise DownloadError(f"cannot reach {url}: the network is unreachable or the server is down "
                        f"({cli.one_line(e.reason)})") from None
  except OSError as e:  # e.g. a timeout before the headers arrive
    raise DownloadError(f"cannot reach {url}: {cli.one_line(e)}") from None
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
    raise DownloadError(f"cannot read {url}: {' '.join(e.message.split())} (check the URL, your "
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
  directory = os.path.dirname(os.path.abspath(dest))
  os.makedirs(directory, exist_ok=True)
  # Not mkstemp: its 0600 mode would stay on the checkpoint; open() follows the umask.
  tmp = os.path.join(directory, f".{os.path.basename(dest)}.{uuid.uuid4().hex[:8]}.part")
  try:
    with open(tmp, "xb") as out:
      _copy(url, out, urlopen, label=os.path.basename(dest), verbose=verbose)
    if dest.endswith(".npz") and not zipfile.is_zipfile(tmp):
      raise DownloadError(f"{url} did not send an .npz file ({os.path.getsize(tmp)} bytes of "
                          "something else: a proxy or login page?)")
    os.replace(tmp, dest)
  finally:
    if os.path.exists(tmp):
      os.unlink(tmp)
  return dest


def download(name_or_url: str, directory: str = released.LOCAL_DIR, *, force: bool = False,
             urlopen: UrlOpener = urllib.request.urlopen, verbose: bool = True) -> str:
  """Fetches a released file into DIRECTORY/FAMILY/FILE.npz unless it is there; returns it.

  Only complete files ever get the final name, so an existing one is kept unless `force`.
  """
  url = released.resolve(name_or_url, local_dir=None)
  if not released.has_scheme(url):
    raise DownloadError(f"{name_or_url} is a local path, not a URL or a released name")
  dest = released.local_path(url, directory)
  if os.path.exists(dest) and not force:
    if verbose:
      print(f"{dest} is already downloaded (--force fetches it again)", file=sys.stderr)
    return dest
  return fetch(url, dest, urlopen=urlopen, verbose=verbose)


@cli.command
def main(argv):
  if len(argv) != 2:
    raise cli.UsageError("give one NAME_OR_URL, e.g. imagenet21k/ViT-B_16")
  print(download(argv[1], flags.FLAGS.dir, force=flags.FLAGS.force))


def define_flags(flag_values: flags.FlagValues = flags.FLAGS) -> None:
  """The command's flags; not defined on import, so importers' flags stay their own."""
  define = dict(flag_values=flag_values)
  flags.DEFINE_string("dir", released.LOCAL_DIR, "Root folder: files go to DIR/FAMILY/FILE.npz.",
                      **define)
  flags.DEFINE_bool("force", False, "Download again even if the file is already there.", **define)


if __name__ == "__main__":
  cli.run(main, define_flags)
