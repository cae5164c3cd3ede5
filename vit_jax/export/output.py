"""OUT appears complete or not at all: an export is written into a temporary folder beside
OUT and renamed to OUT only after it verified (vit_jax.base.no_clobber.atomic_folder). What OUT
may replace follows the project's no-clobber rule: a new or empty folder, an earlier
export, or anything with overwrite."""

import contextlib
import json
import os
from typing import Iterator

from vit_jax.base import no_clobber, storage
from vit_jax.checkpoints import released
from vit_jax.export.source import ExportError

KIND = "export"


def check_writable(out: str, overwrite: bool) -> None:
  """Fails in one line, before any slow work, when OUT cannot (or must not) be written."""
  if released.has_scheme(out):
    raise ExportError(f"OUT must be a local folder, got {out}: export locally, then copy the "
                      "folder (e.g. gcloud storage cp -r)")
  no_clobber.check_output_dir(out, KIND, overwrite)
  existing = os.path.abspath(out)
  while not os.path.exists(existing):
    existing = os.path.dirname(existing)
  if not os.access(existing, os.W_OK | os.X_OK):
    raise ExportError(f"cannot write {out}: {existing} is not writable (choose an OUT where "
                      "you may create files)")


@contextlib.contextmanager
def staged(out: str) -> Iterator[str]:
  """A fresh temporary folder beside `out`; on success it replaces `out` (checked by
  check_writable), on any error it is removed and `out` is left as it was."""
  with contextlib.ExitStack() as stack:
    try:
      tmp = stack.enter_context(no_clobber.atomic_folder(out))
    except OSError as e:
      raise ExportError(f"cannot write {os.path.abspath(out)}: {e.strerror or e}") from None
    yield tmp
    storage.write_atomic(os.path.join(tmp, no_clobber.MARKER),
                         json.dumps(no_clobber.written_by(KIND)))
