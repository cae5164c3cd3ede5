"""Which errors of the storage clients mean "the store stopped answering" (as opposed to
an answer, such as "not found"), for storage's one-line StorageUnavailable.

Each client says it its own way, and not always as an OSError: aiohttp's ClientError
(a server disconnect, a refused connection), asyncio's and fsspec's timeouts, a
cancelled future or task (fsspec's event loop torn down mid-call), RuntimeError
"Session is closed" (gcsfs's aiohttp session closed under a call in flight), gcsfs's
HttpError for 5xx and 429 after its own retries, and tensorstore's status words
(UNAVAILABLE, DEADLINE_EXCEEDED, ...) in a ValueError's text.
"""

import asyncio
import concurrent.futures
import functools

# What the store said, as opposed to not answering at all.
ANSWERS = (FileNotFoundError, FileExistsError, IsADirectoryError, NotADirectoryError,
           PermissionError)
# tensorstore's and the HTTP clients' words for a store that stopped answering.
UNREACHABLE_SIGNS = ("UNAVAILABLE", "Connection refused", "Couldn't connect", "CURL error",
                     "Cannot connect to host", "DEADLINE_EXCEEDED", "Server disconnected",
                     "Session is closed", "Connection reset")
CANCELLED = (asyncio.CancelledError, concurrent.futures.CancelledError)
# HTTP statuses a client retries before it gives up: the server's failures, throttling.
_RETRIED_STATUSES = range(500, 600)


@functools.lru_cache(maxsize=None)
def client_errors() -> tuple:
  """The HTTP clients' own exceptions (fsspec's http and gcsfs let them through)."""
  found = []
  try:
    import aiohttp  # pylint: disable=import-outside-toplevel
    found.append(aiohttp.ClientError)
  except ImportError:
    pass
  return tuple(found)


def _http_status(error: BaseException):
  """gcsfs's HttpError code (None for other errors; gcsfs is optional)."""
  if type(error).__name__ == "HttpError" and type(error).__module__.startswith("gcsfs"):
    return getattr(error, "code", None)
  return None


def stopped_answering(error: BaseException) -> bool:
  """Whether `error` (from a storage call that ran out of its client's retries) means
  the store cannot be reached, rather than an answer or a bug."""
  if isinstance(error, ANSWERS):
    return False
  if isinstance(error, (OSError, TimeoutError, *CANCELLED, *client_errors())):
    return True
  status = _http_status(error)
  if status is not None:
    return status in _RETRIED_STATUSES or status in (408, 429)
  return any(sign in str(error) for sign in UNREACHABLE_SIGNS)
