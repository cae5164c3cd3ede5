"""The no-clobber rule of every command that writes a folder or a file the user names
(convert, visualize --out, fewshot --json, predict --json, plan --json, lora, vtab, export),
and the atomic writer of whole folders: it sits beside the storage layer, below every
command.

A writer creates a new folder, or writes into an empty one or one that holds its own
marker (MARKER, {"written_by": "vit_jax.<kind>"}) from an earlier run of the same command;
anything else (a training workdir, someone's model folder, another command's output) is
refused in one line unless the user passes --overwrite. A destination file is written if
absent, or over a JSON file stamped with the same "written_by" (or, for a command whose JSON
is a list of records, one of its shape), else refused the same way.
A path below an existing file is refused in one line, not as [Errno 17]. One process at a
time writes a local destination (sole_writer).
"""

import contextlib
import fcntl
import json
import os
import shutil
import sys
import tempfile
from typing import Any, Callable, Dict, Iterator, List, Optional

from vit_jax.base import errors, storage

MARKER = ".vit_jax-output.json"
STDOUT = "-"  # an output file named so is standard output (a text output's)
OVERWRITE_HELP = ("Write into an existing folder, or over an existing file, that this "
                  "command did not create (refused by default: nothing is clobbered).")


class OutputExistsError(errors.InvalidInput):
  """A destination that holds something this command did not write; one line naming the
  path, what is there and --overwrite."""


class OutputBusyError(errors.InvalidInput):
  """A destination that another process is writing right now."""


@contextlib.contextmanager
def sole_writer(path: str, kind: str) -> Iterator[None]:
  """Holds the local `path` for this process while it writes it (the whole command: a
  second one fails at once, before its slow work), or raises OutputBusyError. Without it
  two commands writing one destination both end well and both say they wrote it, while
  one replaced the other's files (or mixed them). An flock on `.NAME.lock` beside it: the
  kernel releases it when its holder dies, so a SIGKILLed writer never blocks the next."""
  if storage.is_url(path):  # object stores have no locks; each file there is still atomic
    yield
    return
  _check_parents(path)
  path = os.path.abspath(path)
  lock = os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.lock")
  os.makedirs(os.path.dirname(lock), exist_ok=True)
  while True:
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    try:
      fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
      holder = os.read(fd, 200).decode(errors="replace").strip() or "another process"
      os.close(fd)
      raise OutputBusyError(f"{path} is being written by {holder} right now: wait until it "
                            f"ends (then rerun to replace its output, or use it) or name "
                            f"another destination for vit_jax.{kind}") from None
    if os.path.exists(lock) and os.stat(lock).st_ino == os.fstat(fd).st_ino:
      break  # else its holder removed it between our open and flock: take a fresh one
    os.close(fd)
  try:
    os.ftruncate(fd, 0)
    os.write(fd, f"vit_jax.{kind} (pid {os.getpid()})".encode())
    yield
  finally:
    with contextlib.suppress(OSError):  # left behind, it is taken over by the next writer
      os.remove(lock)  # before the flock goes: a waiter that opened it then retries
    os.close(fd)


def written_by(kind: str) -> Dict[str, str]:
  """The stamp a writer of `kind` ("convert", "fewshot", ...) puts in its marker or JSON."""
  return {"written_by": f"vit_jax.{kind}"}


_UNREADABLE = object()
STAMP_LIMIT = 1 << 20  # no stamp of ours is larger
RECORDS_LIMIT = 1 << 28  # a list of records read to tell its shape


def _json_of(path: str, limit: int):
  """The JSON value of a file up to `limit` bytes; _UNREADABLE for anything else."""
  try:
    if not storage.isfile(path) or (not storage.is_url(path) and os.path.getsize(path) > limit):
      return _UNREADABLE
    return json.loads(storage.read_bytes(path))
  except (OSError, ValueError):
    return _UNREADABLE


def _stamp_of(path: str) -> Optional[str]:
  """The "written_by" of a JSON file (a marker, a result file); None for anything else."""
  value = _json_of(path, STAMP_LIMIT)
  return value.get("written_by") if isinstance(value, dict) else None


def records_with(*keys: str) -> Callable[[Any], bool]:
  """The shape of a command's JSON list of records (which has no room for a stamp): a
  non-empty list of objects, each holding these keys (claim_output_file's `owns`)."""
  return lambda value: (isinstance(value, list) and bool(value) and all(
      isinstance(item, dict) and set(keys) <= set(item) for item in value))


def _check_parents(path: str) -> None:
  """A path under an existing file cannot be created: say so instead of [Errno 17]/[20]
  (object stores have no such paths)."""
  if storage.is_url(path):
    return
  parent = os.path.dirname(os.path.abspath(path))
  while not os.path.exists(parent) and os.path.dirname(parent) != parent:
    parent = os.path.dirname(parent)
  if not os.path.isdir(parent):
    raise OutputExistsError(f"cannot write {path}: {parent} is a file, not a folder; pick "
                            "another path")


def _listing(names: List[str]) -> str:
  names = sorted(names)
  return ", ".join(names[:3]) + (f" (+{len(names) - 3} more)" if len(names) > 3 else "")


def check_output_dir(path: str, kind: str, overwrite: bool = False) -> None:
  """Raises OutputExistsError unless `path` is new, empty, our `kind`'s earlier output, or
  `overwrite`; writes nothing (call it before slow work, then claim_output_dir)."""
  path = os.fspath(path)
  if path == STDOUT:  # made a folder named '-'
    raise errors.InvalidInput(f"'{STDOUT}' would be standard output, where vit_jax.{kind} "
                              "cannot write its folder of files: name a folder")
  _check_parents(path)
  if storage.isfile(path):
    raise OutputExistsError(f"{path} is a file, not a folder: name a new folder for the "
                            f"output of vit_jax.{kind}")
  if overwrite:
    return
  entries = [name for name in storage.listdir(path) if name != MARKER]
  owner = _stamp_of(storage.join(path, MARKER))
  if entries and owner != written_by(kind)["written_by"]:
    what = f"the output of {owner}" if owner else f"files it did not write ({_listing(entries)})"
    raise OutputExistsError(f"{path} already holds {what}: name a new folder for vit_jax.{kind}"
                            ", or pass --overwrite to write into it")


def claim_output_dir(path: str, kind: str, overwrite: bool = False) -> str:
  """The folder `path`, created if missing and marked as `kind`'s output, after
  check_output_dir; returns the path."""
  check_output_dir(path, kind, overwrite)
  path = os.fspath(path)
  storage.makedirs(path)
  marker = storage.join(path, MARKER)
  if _stamp_of(marker) != written_by(kind)["written_by"]:
    storage.write_atomic(marker, json.dumps(written_by(kind)))
  return path


def claim_output_file(path: str, kind: str, overwrite: bool = False, *,
                      stdout_ok: bool = False,
                      owns: Optional[Callable[[Any], bool]] = None) -> None:
  """Raises OutputExistsError unless the file `path` is absent, a JSON file stamped
  written_by(kind) (write yours with that stamp), or `overwrite`. owns: for a command whose
  JSON is a list of records (no room for a stamp), whether a JSON value has its shape
  (records_with): such a file is its own too. STDOUT ('-') is standard output where the
  command writes text (stdout_ok, see write_text), else refused: a file named '-' is never
  what was meant."""
  path = os.fspath(path)
  if path == STDOUT:
    if stdout_ok:
      return
    raise errors.InvalidInput(f"'{STDOUT}' would be standard output, where vit_jax.{kind} "
                              "cannot write its binary output: name a file")
  _check_parents(path)
  if storage.isdir(path):
    raise OutputExistsError(f"{path} is a folder, not a file: name the file to write")
  if storage.exists(path) and not overwrite and not _written_by(path, kind, owns):
    raise OutputExistsError(f"{path} already exists and vit_jax.{kind} did not write it: "
                            "name a new file, or pass --overwrite to replace it")


def _written_by(path: str, kind: str, owns: Optional[Callable[[Any], bool]]) -> bool:
  """Whether the file holds `kind`'s earlier output: its stamp, or the shape `owns` tells."""
  if _stamp_of(path) == written_by(kind)["written_by"]:
    return True
  value = _UNREADABLE if owns is None else _json_of(path, RECORDS_LIMIT)
  return value is not _UNREADABLE and owns(value)


def write_text(path: str, text: str) -> None:
  """A text output: to standard output for STDOUT, else atomically to the file."""
  if path == STDOUT:
    sys.stdout.write(text)
    sys.stdout.flush()
  else:
    storage.write_atomic(path, text)


@contextlib.contextmanager
def atomic_folder(path: str) -> Iterator[str]:
  """Yields a fresh local folder to fill; when the block ends without error it replaces
  `path` (an existing folder is swapped out, then removed), on any error it is removed and
  `path` stays as it was. The staging folders of writers killed mid-way (their pid, in the
  folder's name, gone from this host) are removed by the next writer of `path`."""
  path = os.path.abspath(path)
  parent, name = os.path.split(path)
  os.makedirs(parent, exist_ok=True)
  _remove_stale(parent, name)
  tmp = tempfile.mkdtemp(dir=parent, prefix=f".{name}.partial-{os.getpid()}-")
  try:
    yield tmp
    os.chmod(tmp, 0o777 & ~storage.umask())  # mkdtemp's owner-only mode: outputs are shared
    if os.path.isdir(path):
      old = tempfile.mkdtemp(dir=parent, prefix=f".{name}.old-{os.getpid()}-")
      os.rename(path, os.path.join(old, "out"))
      os.rename(tmp, path)
      shutil.rmtree(old, ignore_errors=True)
    else:
      os.rename(tmp, path)  # fails rather than replace something that appeared meanwhile
  finally:
    shutil.rmtree(tmp, ignore_errors=True)


def _remove_stale(parent: str, name: str) -> None:
  """Staging folders of writers of `name` killed (SIGKILL) before they could clean up."""
  for entry in os.listdir(parent):
    for kind in (".partial-", ".old-"):
      prefix = f".{name}{kind}"
      pid = entry[len(prefix):].split("-")[0] if entry.startswith(prefix) else ""
      if pid.isdigit() and not storage.pid_alive(int(pid)):
        shutil.rmtree(os.path.join(parent, entry), ignore_errors=True)
