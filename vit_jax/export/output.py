"""OUT appears complete or not at all: an export is written into a temporary folder beside
OUT and renamed to OUT only after it verified. What OUT may replace follows the project's
no-clobber rule (vit_jax.runs.outputs): a new or empty folder, an earlier export, or
anything with overwrite."""

import contextlib
import json
import os
import shutil
import tempfile
from typing import Iterator

from vit_jax.checkpoints import released
from vit_jax.export.source import ExportError
from vit_jax.runs import outputs, workdir

KIND = "export"


def check_writable(out: str, overwrite: bool) -> None:
  """Fails in one line, before any slow work, when OUT cannot (or must not) be written."""
  if released.has_scheme(out):
    raise ExportError(f"OUT must be a local folder, got {out}: export locally, then copy the "
                      "folder (e.g. gcloud storage cp -r)")
  outputs.check_output_dir(out, KIND, overwrite)
  existing = os.path.abspath(out)
  while not os.path.exists(existing):
    existing = os.path.dirname(existing)
  if not os.access(existing, os.W_OK | os.X_OK):
    raise ExportError(f"cannot write {out}: {existing} is not writable (choose an OUT where "
                      "you may create files)")


@contextlib.contextmanager
def staged(out: str, overwrite: bool) -> Iterator[str]:
  """A fresh temporary folder beside `out`; on success it replaces `out`, on any error it
  is removed and `out` is left as it was."""
  out = os.path.abspath(out)
  parent = os.path.dirname(out)
  try:
    os.makedirs(parent, exist_ok=True)
    _remove_stale(parent, os.path.basename(out))
    tmp = tempfile.mkdtemp(dir=parent, prefix=f".{os.path.basename(out)}.partial-{os.getpid()}-")
  except OSError as e:
    raise ExportError(f"cannot write {out}: {e.strerror or e}") from None
  try:
    yield tmp
    with open(os.path.join(tmp, outputs.MARKER), "w", encoding="utf-8") as f:
      json.dump(outputs.written_by(KIND), f)
    _publish(tmp, out)
  finally:
    shutil.rmtree(tmp, ignore_errors=True)


def _remove_stale(parent: str, name: str) -> None:
  """Staging folders of exports to `name` that were killed (SIGKILL) before they could
  clean up: the pid in their name is gone from this host. A live export's stay."""
  for entry in os.listdir(parent):
    for kind in (".partial-", ".old-"):
      prefix = f".{name}{kind}"
      pid = entry[len(prefix):].split("-")[0] if entry.startswith(prefix) else ""
      if pid.isdigit() and not workdir.pid_alive(int(pid)):
        shutil.rmtree(os.path.join(parent, entry), ignore_errors=True)


def _publish(tmp: str, out: str) -> None:
  """Renames tmp to out; an existing out (checked by check_writable) is swapped out first."""
  os.chmod(tmp, 0o777 & ~_umask())  # mkdtemp makes owner-only folders; outputs are shared
  if os.path.isdir(out):
    old = tempfile.mkdtemp(dir=os.path.dirname(out),
                           prefix=f".{os.path.basename(out)}.old-{os.getpid()}-")
    os.rename(out, os.path.join(old, "out"))
    os.rename(tmp, out)
    shutil.rmtree(old, ignore_errors=True)
  else:
    os.rename(tmp, out)  # fails rather than replace something that appeared meanwhile


def _umask() -> int:
  mask = os.umask(0)
  os.umask(mask)
  return mask
