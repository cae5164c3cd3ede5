"""The client of each URL scheme (fsspec's filesystem for gs://, http(s)://, ...), made once
per scheme with this project's settings: quiet retries, per-operation HTTP timeouts, and a
one-line refusal for a scheme with no client installed."""

import functools
import logging

import fsspec

from vit_jax.base import console, errors

HTTP = ("http", "https")
TIMEOUT_S = 60
# The package fsspec needs for a scheme, where it is not fsspec itself.
CLIENT_PACKAGES = {"gs": "gcsfs", "gcs": "gcsfs", "s3": "s3fs", "s3a": "s3fs", "az": "adlfs",
                   "abfs": "adlfs", "http": "aiohttp", "https": "aiohttp"}


class UnsupportedURL(errors.InvalidInput):
  """A URL whose scheme has no client here (a package to install, or none at all): said
  first, in one line, not taken for a lost connection."""


def protocol_of(path: str) -> str:
  return str(path).split("://", 1)[0]


def _http_timeout():
  import aiohttp  # pylint: disable=import-outside-toplevel  # fsspec's http client
  return aiohttp.ClientTimeout(sock_connect=TIMEOUT_S, sock_read=TIMEOUT_S)


@functools.lru_cache(maxsize=None)
def _filesystem(protocol: str):
  if not console.verbose_requested():  # it logs a traceback per failed retry series
    for name in ("fsspec", "gcsfs"):
      logging.getLogger(name).setLevel(logging.CRITICAL)
  # Like urllib's timeout: per blocking network operation, not for a whole download.
  timeout = {"client_kwargs": {"timeout": _http_timeout()}} if protocol in HTTP else {}
  try:
    return fsspec.filesystem(protocol, **timeout)
  except ImportError:
    package = CLIENT_PACKAGES.get(protocol, f"the fsspec client of {protocol}://")
    raise UnsupportedURL(f"{protocol}:// needs {package}: pip install {package}") from None
  except ValueError as e:  # fsspec: "Protocol not known"
    raise UnsupportedURL(f"{protocol}:// is not a storage scheme this installation knows "
                         f"({' '.join(str(e).split())}): use a local path, gs:// or "
                         "http(s)://") from None


def url_filesystem(path: str):
  """(fsspec filesystem, path as it names it) for a URL: the one client of every scheme."""
  fs = _filesystem(protocol_of(path))
  return fs, fs._strip_protocol(str(path))  # pylint: disable=protected-access
