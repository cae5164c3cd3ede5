"""What a user sees on the terminal: our progress, evaluations, warnings and summaries.

The libraries underneath (orbax, clu, jax, TensorFlow) log hundreds of INFO lines per run
through absl and Python logging. Our own lines go through the `vit_jax` logger, which
prints short `HH:MM:SS message` lines whatever absl's verbosity; `quiet_libraries()`
hides the libraries' INFO lines unless the user asks for them (`--verbosity=0` on any
command, or VIT_JAX_VERBOSE=1).
"""

import contextlib
import io
import logging
import os
import sys
import threading
import time
from typing import Callable, Iterator, Optional, TextIO, Tuple

VERBOSE_ENV = "VIT_JAX_VERBOSE"

log = logging.getLogger("vit_jax")


class _StderrHandler(logging.StreamHandler):
  """Writes to the current sys.stderr (notebooks and test harnesses swap it)."""

  def __init__(self):
    super().__init__()
    self.setFormatter(logging.Formatter("%(asctime)s %(levelname_prefix)s%(message)s",
                                        datefmt="%H:%M:%S"))

  @property
  def stream(self):
    return sys.stderr

  @stream.setter
  def stream(self, _):
    pass

  def emit(self, record):
    record.levelname_prefix = "" if record.levelno <= logging.INFO else (
        record.levelname.lower() + ": ")
    super().emit(record)


if not log.handlers:
  log.addHandler(_StderrHandler())
  log.setLevel(logging.INFO)
  log.propagate = False


def verbose_requested(verbosity_flag_present: Optional[bool] = None) -> bool:
  """--verbosity given on the command line (looked up when not passed), or the env var."""
  if verbosity_flag_present is None:
    from absl import flags
    verbosity_flag_present = flags.FLAGS.is_parsed() and flags.FLAGS["verbosity"].present
  return verbosity_flag_present or os.environ.get(VERBOSE_ENV, "") not in ("", "0")


def quiet_libraries(verbosity_flag_present: Optional[bool] = None) -> None:
  """Hides third-party INFO logging (absl users such as orbax and clu, jax, TF's C++)."""
  if verbose_requested(verbosity_flag_present):
    return
  from absl import logging as absl_logging
  absl_logging.set_verbosity(absl_logging.WARNING)
  for name in ("jax", "orbax", "tensorflow"):
    logging.getLogger(name).setLevel(logging.WARNING)
  # orbax's background writes report each failed chunk as a "never retrieved" future,
  # and each failed save thread as an error with its traceback while the run goes on;
  # the failure itself reaches the user as one error line when the run next waits for
  # its saves (vit_jax.training.runs.orbax_checkpoints).
  logging.getLogger("asyncio").setLevel(logging.CRITICAL)
  logging.getLogger("absl").addFilter(_no_orbax_errors)  # once: the same function


def _no_orbax_errors(record: logging.LogRecord) -> bool:
  return record.levelno < logging.ERROR or f"{os.sep}orbax{os.sep}" not in record.pathname


def duration(seconds: float) -> str:
  """'8 s', '2 min 05 s', '1 h 02 min': elapsed times in progress lines."""
  seconds = int(round(seconds))
  if seconds < 60:
    return f"{seconds} s"
  if seconds < 3600:
    return f"{seconds // 60} min {seconds % 60:02d} s"
  return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"


def _progress_stream() -> Tuple[TextIO, bool]:
  """(where ticks go, whether to close it): a copy of file descriptor 2 made now, so that
  ticks still show while platforms.quiet_stderr hides what C++ libraries write there; the
  current sys.stderr where that is not descriptor 2 (notebooks, tests)."""
  try:
    if sys.stderr.fileno() == 2:
      return os.fdopen(os.dup(2), "w"), True
  except (AttributeError, OSError, io.UnsupportedOperation):
    pass
  return sys.stderr, False


@contextlib.contextmanager
def stage(what: str, heartbeat_s: float = 60.0) -> Iterator[Callable[[str], None]]:
  """Logs `what ...`, then, while the block runs, how long it has run (a counter ticking in
  place on a terminal, elsewhere a line every heartbeat_s), then `what: RESULT (TIME)`; the
  block names RESULT by calling what this yields (default: done). A long compile is then
  never one silent line."""
  started = time.monotonic()
  result = ["done"]
  log.info("%s ...", what)
  stream, owned = _progress_stream()
  tty = stream.isatty()
  stop = threading.Event()

  def tick():
    while not stop.wait(1.0 if tty else heartbeat_s):
      elapsed = duration(time.monotonic() - started)
      clock = time.strftime("%H:%M:%S")
      stream.write(f"\r{clock} {what} ... {elapsed}\x1b[K" if tty else
                   f"{clock} {what}: still running after {elapsed}\n")
      stream.flush()

  ticker = threading.Thread(target=tick, name="vit_jax-progress", daemon=True)
  ticker.start()
  try:
    yield lambda text: result.__setitem__(0, text)
  finally:
    stop.set()
    ticker.join()
    if tty:
      stream.write("\r\x1b[K")
      stream.flush()
    if owned:
      stream.close()
  log.info("%s: %s (%s)", what, result[0], duration(time.monotonic() - started))
