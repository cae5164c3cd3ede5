"""The run's own files, on a local disk or an object store (`gs://...`), through one API.

Every module that writes into a workdir or an output folder goes through here, so the same
guarantees hold wherever the run writes:
  * `write_atomic(path, data)` replaces a whole file at once: readers see the old file or
    the new one, never a truncated mix (local: a temporary file in the same folder, fsync,
    rename; object stores: one upload, which the store publishes only when complete);
  * `create_exclusive(path, data)` creates a file only if it does not exist yet (local:
    O_EXCL; GCS: an upload with the precondition "generation 0", i.e. no live object);
  * directories exist implicitly on object stores: `makedirs` is a no-op there and
    `isdir` means "some object lies under this prefix".

URLs go through fsspec (`gcsfs` for gs://, and any other protocol fsspec knows), not
`tf.io.gfile`: TensorFlow's GCS client cannot be pointed at another endpoint, gcsfs honours
STORAGE_EMULATOR_HOST, so what the tests run against the emulator is the production path.
"""

import functools
import os
import shutil
import tempfile
from typing import List, Optional, Union

Data = Union[str, bytes]


def is_url(path: str) -> bool:
  """Whether `path` names an object store (or any fsspec URL) rather than a local path."""
  return "://" in str(path)


def join(*parts: str) -> str:
  """os.path.join, which also joins URL paths with '/'."""
  return os.path.join(*map(str, parts))


@functools.lru_cache(maxsize=None)
def _filesystem(protocol: str):
  import fsspec  # pylint: disable=g-import-not-at-top  (only runs writing to URLs need it)
  try:
    return fsspec.filesystem(protocol)
  except (ImportError, ValueError) as e:
    raise OSError(f"cannot open {protocol}:// paths ({' '.join(str(e).split())}); for gs:// "
                  "install gcsfs (pip install gcsfs)") from None


def _url_fs(path: str):
  """(filesystem, path as that filesystem names it) for a URL."""
  protocol = str(path).split("://", 1)[0]
  fs = _filesystem(protocol)
  return fs, fs._strip_protocol(str(path))  # pylint: disable=protected-access


def _as_bytes(data: Data) -> bytes:
  return data.encode("utf-8") if isinstance(data, str) else data


def write_atomic(path: str, data: Data) -> None:
  """Writes the whole of `path` (str: UTF-8 text) so that no reader, and no kill at any
  moment, sees a partial file; creates missing parent folders."""
  payload = _as_bytes(data)
  if is_url(path):
    fs, key = _url_fs(path)
    fs.pipe_file(key, payload)
    return
  directory = os.path.dirname(os.path.abspath(path))
  os.makedirs(directory, exist_ok=True)
  fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{os.path.basename(path)}.", suffix=".tmp")
  try:
    with os.fdopen(fd, "wb") as f:
      f.write(payload)
      f.flush()
      os.fsync(f.fileno())
    os.chmod(tmp, 0o666 & ~_umask())  # mkstemp's 0600 would stay on the result
    os.replace(tmp, path)
  except BaseException:
    if os.path.exists(tmp):
      os.unlink(tmp)
    raise


@functools.lru_cache(maxsize=None)
def _umask() -> int:
  mask = os.umask(0)
  os.umask(mask)
  return mask


def create_exclusive(path: str, data: Data) -> bool:
  """Creates `path` holding `data` only if nothing is there; False if something is."""
  payload = _as_bytes(data)
  if is_url(path):
    fs, key = _url_fs(path)
    if fs.exists(key):  # stores that ignore the precondition still refuse a visible file
      return False
    try:
      fs.pipe_file(key, payload, mode="create")
    except (FileExistsError, OSError) as e:
      if isinstance(e, FileExistsError) or "412" in str(e) or "Precondition" in str(e):
        return False
      raise
    fs.invalidate_cache(key)
    return True
  try:
    fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666)
  except FileExistsError:
    return False
  with os.fdopen(fd, "wb") as f:
    f.write(payload)
  return True


def read_bytes(path: str) -> bytes:
  if is_url(path):
    fs, key = _url_fs(path)
    return fs.cat_file(key)
  with open(path, "rb") as f:
    return f.read()


def read_text(path: str) -> str:
  return read_bytes(path).decode("utf-8")


def exists(path: str) -> bool:
  if is_url(path):
    fs, key = _url_fs(path)
    fs.invalidate_cache(key)
    return fs.exists(key)
  return os.path.exists(path)


def isdir(path: str) -> bool:
  if is_url(path):
    fs, key = _url_fs(path)
    fs.invalidate_cache(key)
    return fs.isdir(key)
  return os.path.isdir(path)


def isfile(path: str) -> bool:
  if is_url(path):
    fs, key = _url_fs(path)
    fs.invalidate_cache(key)
    return fs.isfile(key)
  return os.path.isfile(path)


def makedirs(path: str) -> None:
  """Creates a local folder (and parents); nothing to do on object stores."""
  if not is_url(path):
    os.makedirs(path, exist_ok=True)


def listdir(path: str) -> List[str]:
  """Names directly under `path` (files and folders), sorted; [] if there is none."""
  if is_url(path):
    fs, key = _url_fs(path)
    fs.invalidate_cache(key)
    try:
      return sorted(os.path.basename(p.rstrip("/")) for p in fs.ls(key, detail=False))
    except FileNotFoundError:
      return []
  try:
    return sorted(os.listdir(path))
  except FileNotFoundError:
    return []


def modified_time(path: str) -> float:
  """Seconds since the epoch of the last write (an object's upload time on stores)."""
  if is_url(path):
    fs, key = _url_fs(path)
    fs.invalidate_cache(key)
    return fs.modified(key).timestamp()
  return os.path.getmtime(path)


def remove(path: str) -> None:
  """Deletes a file; missing is fine."""
  try:
    if is_url(path):
      fs, key = _url_fs(path)
      fs.rm_file(key)
      fs.invalidate_cache(key)
    else:
      os.unlink(path)
  except FileNotFoundError:
    pass


def remove_empty_dir(path: str) -> None:
  """Removes a local folder if empty (object stores have no empty folders)."""
  if not is_url(path):
    try:
      os.rmdir(path)
    except OSError:
      pass


def move(source: str, dest: str) -> None:
  """Moves a file or folder (local: one rename; object stores: copy then delete, so a kill
  half-way leaves both copies, never none)."""
  if is_url(source):
    fs, key = _url_fs(source)
    _, dest_key = _url_fs(dest)
    fs.mv(key, dest_key, recursive=True)
    fs.invalidate_cache()
    return
  os.makedirs(os.path.dirname(os.path.abspath(dest)), exist_ok=True)
  os.replace(source, dest)


def free_bytes(path: str) -> Optional[int]:
  """Free space where `path` would be written; None on object stores (no such limit)."""
  if is_url(path):
    return None
  while not os.path.exists(path) and os.path.dirname(path) != path:
    path = os.path.dirname(path)
  return shutil.disk_usage(path).free

