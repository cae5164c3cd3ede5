"""Every read and write of a file or URL in vit_jax, local or remote, through one API, so
the same guarantees hold wherever a file lives:
  * `write_atomic` / `atomic_file` replace a whole file at once: readers see the old file
    or the new one, never a truncated mix (local: a temporary file in the same folder,
    fsync, rename; object stores: one upload, which the store publishes only complete);
  * `create_exclusive(path, data)` creates a file only if it does not exist yet (local:
    O_EXCL; GCS: an upload with the precondition "generation 0", i.e. no live object);
  * directories exist implicitly on object stores: `makedirs` is a no-op there and
    `isdir` means "some object lies under this prefix".
URLs go through fsspec (gcsfs for gs://, aiohttp for http(s)://, any protocol it knows),
not tf.io.gfile: TensorFlow's GCS client cannot be pointed at another endpoint, gcsfs
honours STORAGE_EMULATOR_HOST, so what the tests run against the emulator is the
production path (tests/base/test_storage.py checks that nothing else opens files).
"""

import contextlib
import functools
import os
import shutil
import tempfile
from typing import BinaryIO, Callable, Dict, Iterator, List, Optional, TypeVar, Union

import fsspec

from vit_jax.base import errors, object_moves, store_faults, url_clients

# gcsfs caches folder listings for as long as the process lives, but a workdir is also
# written by others: tensorstore (orbax's arrays), other hosts of the job. A stale listing
# made orbax's retention fail to delete a step it had just written, so listings are read
# fresh (a user's own fsspec configuration for gs still wins).
for _scheme in ("gs", "gcs"):
  fsspec.config.conf.setdefault(_scheme, {}).setdefault("use_listings_cache", False)

Data = Union[str, bytes]
F = TypeVar("F", bound=Callable)
_unreachable: Dict[str, str] = {}  # protocol -> why, once a request ran out of retries


client_errors = store_faults.client_errors  # the HTTP clients' own exceptions


class StorageUnavailable(errors.UserError, OSError):
  """The object store stopped answering (after the client's own retries)."""


def _store_errors(function: F) -> F:
  """For URLs: a store that stopped answering becomes one StorageUnavailable line, and
  later calls fail at once instead of each waiting through the client's retries."""

  @functools.wraps(function)
  def wrapped(path, *args, **kwargs):
    if not is_url(path):
      return function(path, *args, **kwargs)
    if connection_lost(path):
      raise StorageUnavailable(_unreachable[_protocol(path)])
    try:
      return function(path, *args, **kwargs)
    except (Exception, *store_faults.CANCELLED) as e:  # pylint: disable=broad-except
      if store_faults.stopped_answering(e):
        raise unavailable(path, e) from None
      raise

  return wrapped  # type: ignore[return-value]


def unavailable(path: str, error: BaseException) -> StorageUnavailable:
  """The one-line error for a store that stopped answering at `path`; from now on every
  call on that protocol fails at once (the client already spent its retries)."""
  protocol = _protocol(path)
  detail = " ".join(str(error).split()) or type(error).__name__
  if len(detail) > 200:  # cut at a word, not in one
    detail = detail[:200].rsplit(" ", 1)[0] + " ..."
  _unreachable[protocol] = (
      f"lost the connection to {protocol}:// while accessing {path} ({detail}): check the "
      "connection and credentials, then rerun the same command (a run resumes from its "
      "last complete checkpoint; checkpoints are saved whole or not at all)")
  return StorageUnavailable(_unreachable[protocol])


def connection_lost(path: str) -> bool:
  """Whether `path` is on a store that already stopped answering (see unavailable())."""
  return is_url(path) and _protocol(path) in _unreachable


_protocol = url_clients.protocol_of


def is_url(path: str) -> bool:
  """Whether `path` names an object store (or any fsspec URL) rather than a local path."""
  return "://" in str(path)


def join(*parts: str) -> str:
  """os.path.join, which also joins URL paths with '/'."""
  return os.path.join(*map(str, parts))


def _as_bytes(data: Data) -> bytes:
  return data.encode("utf-8") if isinstance(data, str) else data


def write_atomic(path: str, data: Data) -> None:
  """Writes the whole of `path` (str: UTF-8 text) at once: see atomic_file."""
  if is_url(path):
    _upload(path, _as_bytes(data))
    return
  with atomic_file(path) as f:
    f.write(_as_bytes(data))


@_store_errors
def _upload(path: str, payload: bytes) -> None:
  fs, key = url_clients.url_filesystem(path)
  fs.pipe_file(key, payload)


@contextlib.contextmanager
def atomic_file(path: str) -> Iterator[BinaryIO]:
  """Yields a binary file whose bytes become `path` when the block ends without error, so
  that no reader, and no kill at any moment, sees a partial file; on an error nothing is
  left, not even the parent folders it had to create. Local: a temporary file beside
  `path`, fsync, rename; object stores: one upload at the end, which the store publishes
  only when complete."""
  if is_url(path):
    with tempfile.TemporaryFile() as buffer:
      yield buffer
      buffer.seek(0)
      _upload(path, buffer.read())
    return
  directory = os.path.dirname(os.path.abspath(path))
  created, missing = [], directory  # the folders makedirs creates, deepest first
  while not os.path.exists(missing):
    created.append(missing)
    missing = os.path.dirname(missing)
  os.makedirs(directory, exist_ok=True)
  fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{os.path.basename(path)}.", suffix=".tmp")
  try:
    with os.fdopen(fd, "w+b") as f:  # readable too: fetch checks what it got
      yield f
      f.flush()
      os.fsync(f.fileno())
    os.chmod(tmp, 0o666 & ~umask())  # mkstemp's 0600 would stay on the result
    os.replace(tmp, path)
  except BaseException:
    if os.path.exists(tmp):
      os.unlink(tmp)
    for folder in created:  # deepest first; stops at one that something else filled
      try:
        os.rmdir(folder)
      except OSError:
        break
    raise


def pid_alive(pid: int) -> bool:
  """Whether process `pid` of this host still runs (a writer's or a lock holder's)."""
  try:
    os.kill(pid, 0)
  except ProcessLookupError:
    return False
  except PermissionError:  # another user's live process
    return True
  return True


@functools.lru_cache(maxsize=None)
def umask() -> int:
  """The process's file-creation mask (read once: reading it means setting it)."""
  mask = os.umask(0)
  os.umask(mask)
  return mask


@_store_errors
def create_exclusive(path: str, data: Data) -> bool:
  """Creates `path` holding `data` only if nothing is there; False if something is."""
  payload = _as_bytes(data)
  if is_url(path):
    fs, key = url_clients.url_filesystem(path)
    if fs.exists(key):  # stores that ignore the precondition still refuse a visible file
      return False
    try:
      fs.pipe_file(key, payload, mode="create")  # 412 (gcsfs: FileExistsError) if taken
    except FileExistsError:
      return False
    fs.invalidate_cache(key)
    return True
  try:
    fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666)
  except FileExistsError:
    return False
  with os.fdopen(fd, "wb") as f:
    f.write(payload)
  return True


def open_append(path: str):
  """A local text file opened for appending (object stores cannot append: callers write
  separate objects there instead)."""
  if is_url(path):
    raise ValueError(f"cannot append to {path}: objects are written whole")
  return open(path, "a", encoding="utf-8")


@_store_errors
def read_bytes(path: str) -> bytes:
  if is_url(path):
    fs, key = url_clients.url_filesystem(path)
    return fs.cat_file(key)
  with open(path, "rb") as f:
    return f.read()


def read_text(path: str, encoding: str = "utf-8") -> str:
  """The file as text; encoding='utf-8-sig' for files people save (spreadsheets and
  Windows editors start UTF-8 with a byte-order mark)."""
  return read_bytes(path).decode(encoding)


@_store_errors
def open_read(path: str) -> BinaryIO:
  """A binary file to read with seeks (a zip's directory without its arrays, a stream
  hashed chunk by chunk)."""
  if is_url(path):
    fs, key = url_clients.url_filesystem(path)
    return fs.open(key, "rb")
  return open(path, "rb")


def _probe(name: str):
  """The local os.path test `name`, or the store's own, asked afresh (other hosts and
  tensorstore write the same workdir, so a cached listing may be stale)."""
  local = getattr(os.path, name)

  @_store_errors
  def probe(path: str) -> bool:
    if is_url(path):
      fs, key = url_clients.url_filesystem(path)
      fs.invalidate_cache(key)
      return getattr(fs, name)(key)
    return local(path)

  probe.__name__ = probe.__qualname__ = name
  return probe


exists = _probe("exists")
isdir = _probe("isdir")
isfile = _probe("isfile")


def makedirs(path: str) -> None:
  """Creates a local folder (and parents); nothing to do on object stores."""
  if not is_url(path):
    os.makedirs(path, exist_ok=True)


@_store_errors
def listdir(path: str) -> List[str]:
  """Names directly under `path` (files and folders), sorted; [] if there is none."""
  if is_url(path):
    fs, key = url_clients.url_filesystem(path)
    fs.invalidate_cache(key)
    try:
      return sorted(os.path.basename(p.rstrip("/")) for p in fs.ls(key, detail=False))
    except FileNotFoundError:
      return []
  try:
    return sorted(os.listdir(path))
  except FileNotFoundError:
    return []


@_store_errors
def modified_time(path: str) -> float:
  """Seconds since the epoch of the last write (an object's upload time on stores)."""
  if is_url(path):
    fs, key = url_clients.url_filesystem(path)
    fs.invalidate_cache(key)
    return fs.modified(key).timestamp()
  return os.path.getmtime(path)


@_store_errors
def remove(path: str) -> None:
  """Deletes a file; missing is fine."""
  try:
    if is_url(path):
      fs, key = url_clients.url_filesystem(path)
      fs.rm_file(key)
      fs.invalidate_cache(key)
    else:
      os.unlink(path)
  except FileNotFoundError:
    pass


@_store_errors
def generation(path: str) -> Optional[str]:
  """The version of a GCS object (changes with every upload); None elsewhere."""
  if not str(path).startswith("gs://"):
    return None
  fs, key = url_clients.url_filesystem(path)
  fs.invalidate_cache(key)
  return str(fs.info(key).get("generation"))


@_store_errors
def remove_generation(path: str, version: str) -> None:
  """Deletes a GCS object only if it is still at `version` (a newer upload, e.g. another
  run's lock, survives); missing or already replaced is fine."""
  fs, key = url_clients.url_filesystem(path)
  bucket, name, _ = fs.split_path(key)
  try:
    fs.call("DELETE", "b/{}/o/{}", bucket, name, ifGenerationMatch=version)
  except (FileNotFoundError, FileExistsError):  # gone, or 412: replaced since
    pass
  fs.invalidate_cache(key)


@_store_errors
def touch(path: str) -> None:
  """Renews a file's modification time (object stores: uploads the same bytes again)."""
  if is_url(path):
    write_atomic(path, read_bytes(path))
  else:
    os.utime(path)


def remove_empty_dir(path: str) -> None:
  """Removes a local folder if empty (object stores have no empty folders)."""
  if not is_url(path):
    try:
      os.rmdir(path)
    except OSError:
      pass


@_store_errors
def move(source: str, dest: str) -> List[str]:
  """Moves a file or folder; returns what could not be moved and stays (local: one
  rename, nothing; object stores: object by object, each moved by the store or copied
  then deleted, so a kill half-way leaves every object in one place or both, never none;
  object_moves)."""
  if is_url(source):
    fs, key = url_clients.url_filesystem(source)
    _, dest_key = url_clients.url_filesystem(dest)
    if fs.isfile(key):
      fs.mv(key, dest_key)
      fs.invalidate_cache()
      return []
    return [f"{_protocol(source)}://{name}" for name in
            object_moves.move_objects(fs, key.rstrip("/"), dest_key.rstrip("/"))]
  os.makedirs(os.path.dirname(os.path.abspath(dest)), exist_ok=True)
  os.replace(source, dest)
  return []


def free_bytes(path: str) -> Optional[int]:
  """Free space where `path` would be written; None on object stores (no such limit)."""
  if is_url(path):
    return None
  while not os.path.exists(path) and os.path.dirname(path) != path:
    path = os.path.dirname(path)
  return shutil.disk_usage(path).free

