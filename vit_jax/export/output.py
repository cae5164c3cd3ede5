"""OUT appears complete or not at all: an export is written into a temporary folder beside
OUT and renamed to OUT only after it verified; an existing OUT is kept unless overwrite."""

import contextlib
import os
import shutil
import tempfile
from typing import Iterator

from vit_jax.export.source import ExportError


def check_writable(out: str, overwrite: bool) -> None:
  """Fails in one line, before any slow work, when OUT cannot (or must not) be written."""
  if os.path.exists(out) and not os.path.isdir(out):
    raise ExportError(f"{out} is a file: OUT must be a folder path (it receives the model "
                      "and metadata.json)")
  if os.path.isdir(out) and os.listdir(out) and not overwrite:
    raise ExportError(f"{out} already exists and is not empty: pass --overwrite to replace "
                      "it, or choose another OUT")
  parent = os.path.dirname(os.path.abspath(out))
  existing = parent
  while not os.path.exists(existing):
    existing = os.path.dirname(existing)
  if not os.path.isdir(existing) or not os.access(existing, os.W_OK | os.X_OK):
    raise ExportError(f"cannot write {out}: {existing} is not a writable folder (choose an "
                      "OUT where you may create files)")


@contextlib.contextmanager
def staged(out: str, overwrite: bool) -> Iterator[str]:
  """A fresh temporary folder beside `out`; on success it replaces `out`, on any error it
  is removed and `out` is left as it was."""
  out = os.path.abspath(out)
  parent = os.path.dirname(out)
  try:
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(dir=parent, prefix=f".{os.path.basename(out)}.partial-")
  except OSError as e:
    raise ExportError(f"cannot write {out}: {e.strerror or e}") from None
  try:
    yield tmp
    _publish(tmp, out, overwrite)
  finally:
    shutil.rmtree(tmp, ignore_errors=True)


def _publish(tmp: str, out: str, overwrite: bool) -> None:
  os.chmod(tmp, 0o777 & ~_umask())  # mkdtemp makes owner-only folders; outputs are shared
  if os.path.isdir(out) and (overwrite or not os.listdir(out)):
    old = tempfile.mkdtemp(dir=os.path.dirname(out), prefix=f".{os.path.basename(out)}.old-")
    os.rename(out, os.path.join(old, "out"))
    os.rename(tmp, out)
    shutil.rmtree(old, ignore_errors=True)
  else:
    os.rename(tmp, out)  # fails rather than replace something that appeared meanwhile


def _umask() -> int:
  mask = os.umask(0)
  os.umask(mask)
  return mask
