"""The command-line layer every `python -m vit_jax.<command>` goes through.

- Flags: absl, defined by the command module's `define_flags(flag_values=flags.FLAGS)`,
  called under `if __name__ == "__main__"` so that importing a command defines no flags.
- Usage mistakes: `raise UsageError(...)` -> `error: ... (--help shows the usage)`, exit 2.
  A bad flag or --config.KEY override (cli.parse_flags) and a config file that does not load
  (cli.load_config) are one line, exit 2, too.
- Errors a user can fix (vit_jax.base.errors.UserError, and OSError: missing file, permissions,
  full disk, network) -> `error: <message on one line>`, exit 1, via `@cli.command` on each
  command's main. Anything else is a bug and keeps its traceback.
- Ctrl-C (KeyboardInterrupt, e.g. vit_jax.training.runs.preemption.Interrupted after a saved step)
  -> `interrupted: <what was saved>`, exit 130, no traceback.
- An error exit does not wait for threads a library left behind (see exit_despite_threads).
- Help: absl's --help, -?, --helpshort, --helpfull and --helpxml exit 0 (absl exits 1, which
  breaks `python -m vit_jax.predict --help && ...`).
"""

import atexit
import errno
import functools
import math
import os
import re
import sys
import threading
import time
from typing import Any, Callable, Iterable, List, NoReturn, Tuple

from absl import app, flags, logging
from ml_collections import config_flags

from vit_jax.base import console, errors

UsageError = app.UsageError
USER_ERRORS = (errors.UserError, OSError)
# What absl and config_dict raise for a bad flag value or --config.KEY override.
FLAG_ERRORS = (flags.Error, AttributeError, KeyError, TypeError, ValueError)
INTERRUPTED_EXIT_CODE = 130  # 128 + SIGINT: what a shell reports for a Ctrl-C'd command
HELP_FLAGS = (app.HelpFlag, app.HelpshortFlag, app.HelpfullFlag, app.HelpXMLFlag)
THREADS_GRACE_S = 3.0  # how long an error exit lets other threads finish


def innermost(error: BaseException) -> BaseException:
  """config_dict nests the real error as the first arg (a mistyped --config.KEY)."""
  while error.args and isinstance(error.args[0], BaseException):
    error = error.args[0]
  return error


def one_line(error: Any) -> str:
  """An error's message (or any text) on one line."""
  if isinstance(error, BaseException):
    error = innermost(error)
    error = error.args[0] if len(error.args) == 1 else error  # KeyError's str() adds quotes
  return " ".join(str(error).split())


def fail(message: str, code: int = 1) -> NoReturn:
  """Ends the command with `error: <message>` on one line: users need the cause, not a trace."""
  logging.debug("full traceback", exc_info=True)
  print(f"error: {' '.join(message.split())}", file=sys.stderr)
  sys.exit(code)


def user_error_message(error: BaseException) -> str:
  """The one line shown for a user error; a full disk says that finished work is intact."""
  if isinstance(error, OSError) and error.errno == errno.ENOSPC:
    return (f"disk full writing {error.filename or 'the output'} ({error.strerror}): free some "
            "space and rerun the same command; finished checkpoints are intact")
  return one_line(error)


def command(main: Callable[..., Any]) -> Callable[..., Any]:
  """Decorates a command's main: user errors (USER_ERRORS) end it with one `error:` line."""
  @functools.wraps(main)
  def run_main(*args, **kwargs):
    try:
      return main(*args, **kwargs)
    except USER_ERRORS as e:
      fail(user_error_message(e))
  return run_main


def no_arguments(argv: List[str]) -> None:
  """For commands that take flags only."""
  if len(argv) > 1:
    raise UsageError(f"unexpected arguments: {' '.join(argv[1:])}")


def positive_numbers(values: Iterable[str], kind: type, flag: str,
                     example: str = "") -> Tuple[Any, ...]:
  """A list flag's values as positive numbers of `kind`, or a UsageError naming the flag."""
  values = list(values)
  try:
    numbers = tuple(kind(v) for v in values)
  except ValueError:
    numbers = ()
  if not numbers or min(numbers) <= 0:
    what = "integers" if kind is int else "numbers"
    raise UsageError(f"--{flag}={','.join(values)} must be positive {what}"
                     + (f", e.g. {example}" if example else ""))
  return numbers


class ImageSizeParser(flags.ArgumentParser):
  """--image_size=384 (square) or 384x512 (HEIGHTxWIDTH) -> (height, width)."""
  syntax = "a side in pixels (384) or HEIGHTxWIDTH (384x512)"

  def parse(self, argument):
    if isinstance(argument, tuple):
      return argument
    match = re.fullmatch(r"\s*(\d+)\s*(?:[xX]\s*(\d+)\s*)?", str(argument))
    if not match or int(match[1]) < 1 or int(match[2] or 1) < 1:
      raise ValueError(f"{argument!r} is not {self.syntax}")
    return int(match[1]), int(match[2] or match[1])

  def flag_type(self):
    return "image size"


class FiniteFloatParser(flags.FloatParser):
  """absl's float flag with bounds, refusing nan and inf (absl's bounds let nan through:
  every comparison with it is false)."""

  def convert(self, argument):
    value = super().convert(argument)
    if not math.isfinite(value):
      raise ValueError(f"{argument!r} is not a finite number")
    return value


def define_finite_float(name: str, default: float, help_text: str,
                        flag_values: flags.FlagValues, lower_bound=None, upper_bound=None):
  """A float flag that refuses nan and inf like an out-of-range value (exit 2)."""
  parser = FiniteFloatParser(lower_bound, upper_bound)
  flags.DEFINE(parser, name, default, help_text, flag_values=flag_values,
               serializer=flags.ArgumentSerializer())


def image_size_help(what: str) -> str:
  """The help of an --image_size flag (flags.DEFINE(ImageSizeParser(), ...), in the
  command's module, whose --help then lists it)."""
  return f"Input side in pixels (384) or HEIGHTxWIDTH (384x512); {what}"


def flag_error(error: BaseException) -> NoReturn:
  text = str(innermost(error))
  if "Traceback (most recent call last)" in text:  # config_flags pastes the config file's
    cause = text.strip().splitlines()[-1]  # traceback: its last line is the error itself
    fail(f"cannot load --config: {re.sub(r'^[A-Za-z_.]*(Error|Exception): ', '', cause)}",
         code=2)
  unknown = "no config key " if isinstance(innermost(error), (AttributeError, KeyError)) else ""
  fail(f"bad flag or config override: {unknown}{one_line(error)}", code=2)


def parse_flags(argv: List[str], flag_values: flags.FlagValues = flags.FLAGS) -> List[str]:
  """absl's parsing; a bad flag or --config.KEY override is one line (exit 2)."""
  try:
    return flag_values(argv)
  except FLAG_ERRORS as e:
    flag_error(e)


def load_config(flag_values: flags.FlagValues = flags.FLAGS, name: str = "config"):
  """The config of a --config=FILE[:ARG] flag (None if not given); one that fails to load
  (it raises only when first touched) is one line (exit 2)."""
  try:
    config = flag_values[name].value
    if config is not None:
      config.get("dataset")
    return config
  except FLAG_ERRORS + (OSError,) as e:
    fail(f"cannot load --{name}: {one_line(e)}", code=2)


NO_TENSORFLOW = ("TensorFlow is not installed, and tf.data (config.loader='tf', the default) "
                 "reads data with it: pip install tensorflow, or read the data with Grain: "
                 "--config.loader=grain")


def keep_tensorflow_off_accelerators() -> None:
  """TensorFlow only feeds data (tf.data, image decoding): the accelerators are JAX's. In
  an install without it (requirements-without-tensorflow.txt), one line saying so."""
  try:
    import tensorflow as tf  # seconds to import: only commands that read data pay it.
  except ImportError:
    raise errors.InvalidInput(NO_TENSORFLOW) from None
  tf.config.set_visible_devices([], "GPU")


class _ExitZero:
  """Mixed into an absl help flag: the same text, then exit status 0."""

  def parse(self, argument):
    try:
      super().parse(argument)
    except SystemExit:
      sys.exit(0)


def define_help_flags(flag_values: flags.FlagValues = flags.FLAGS) -> None:
  """absl's help flags, replaced in `flag_values` by ones that exit 0. Idempotent."""
  app.define_help_flags()
  for help_class in HELP_FLAGS:
    flag = type(help_class.__name__, (_ExitZero, help_class), {})()
    if isinstance(flag_values[flag.name], _ExitZero):
      continue
    for name in filter(None, (flag.name, flag.short_name)):
      delattr(flag_values, name)
    flags.DEFINE_flag(flag, flag_values, module_name=app.__name__)


def define_or_exit(define_flags: Callable[..., None],
                   flag_values: flags.FlagValues = flags.FLAGS) -> None:
  """define_flags(flag_values); config_flags applies sys.argv's --config.KEY overrides while
  defining a config_dict flag, so a bad one is one line (exit 2) here too."""
  try:
    define_flags(flag_values)
  except FLAG_ERRORS as e:
    flag_error(e)


def with_exit_codes(main: Callable[..., Any]) -> Callable[..., Any]:
  """`main` ending as every command ends (see the docstring): a usage mistake, a user error
  and Ctrl-C each one line, exit 2, 1 and 130. run() calls mains through it, and so can a
  test that runs a command in its own process."""
  @functools.wraps(main)
  def run_main(*args, **kwargs):
    try:
      return command(main)(*args, **kwargs)
    except UsageError as e:  # absl would print the whole help text before it
      fail(f"{one_line(e)} (--help shows the usage)", code=2)
    except KeyboardInterrupt as e:  # Ctrl-C: one line, not a traceback; the shell's 130
      print(f"interrupted{': ' + one_line(e) if e.args else ''}", file=sys.stderr)
      sys.exit(INTERRUPTED_EXIT_CODE)
  return run_main


def run(main: Callable[[List[str]], Any], define_flags: Callable[..., None] = None,
        flags_parser: Callable[[List[str]], Any] = parse_flags) -> None:
  """Defines the command's flags, then app.run(main) with this module's rules (see the
  docstring) and the libraries' INFO logging hidden unless --verbosity is given."""
  if define_flags is not None:
    define_or_exit(define_flags)
  define_help_flags()

  def quiet_main(argv):
    console.quiet_libraries(flags.FLAGS["verbosity"].present)
    return with_exit_codes(main)(argv)

  try:
    app.run(quiet_main, flags_parser=flags_parser)
  except SystemExit as e:
    if e.code not in (0, None):
      exit_despite_threads(e.code if isinstance(e.code, int) else 1)
    raise


def exit_despite_threads(code: int) -> None:
  """Ends a command that failed now, even if a thread a library started still runs.

  Python waits for every non-daemon thread before it exits. When the store stops
  answering during an orbax save, the save's threads wait up to 5 minutes for a step
  that failed, or retry their writes for many minutes (tensorstore), so the error line
  would be followed by minutes of silence. By the time an error ends a command, the work
  it still needed has been waited for (a save that can finish has), so such threads only
  get a short grace; the exit handlers (jax's shutdown) still run. Returns if no thread
  is left."""
  deadline = time.monotonic() + THREADS_GRACE_S
  while _other_threads() and time.monotonic() < deadline:
    time.sleep(0.05)  # not join(): orbax's threads override it (and raise from it)
  if _other_threads():
    atexit._run_exitfuncs()  # pylint: disable=protected-access
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # pylint: disable=protected-access


def _other_threads() -> List[threading.Thread]:
  """The live threads Python would wait for at exit, besides this one."""
  return [t for t in threading.enumerate() if t is not threading.current_thread()
          and not t.daemon and t.is_alive()]


def check_dataset_override(flag_values: flags.FlagValues = flags.FLAGS) -> None:
  """--config.dataset=X would keep what the config file chose for its own dataset (splits,
  steps, crop, extra eval sets): every config file takes the dataset after its colon,
  which derives all of them, so the override is refused and the colon form named."""
  overrides = config_flags.get_override_values(flag_values["config"])
  if "dataset" not in overrides:
    return
  file = flag_values["config"].config_filename.split(":", 1)[0]
  raise UsageError(
      f"--config.dataset={overrides['dataset']} would keep the splits, steps, crop and eval "
      f"sets {file} chose for its own dataset; pass the dataset after the colon instead: "
      f"--config={file}:{overrides['dataset']}")
