"""The one runner of the absl commands (main, predict, visualize, fewshot, download).

absl's --help, -?, --helpshort, --helpfull and --helpxml print their text and then exit
with status 1, so `python -m vit_jax.predict --help && ...` fails and wrappers report an
error. `run` is app.run with those flags exiting 0; errors keep their non-zero codes.
"""

import sys
from typing import Any, Callable, List

from absl import app, flags

from vit_jax import console

HELP_FLAGS = (app.HelpFlag, app.HelpshortFlag, app.HelpfullFlag, app.HelpXMLFlag)


def one_line(error: BaseException) -> str:
  """An error's message on one line; config_dict nests the real error as the first arg
  (a mistyped --config.KEY: "'bach'\nDid you mean "batch"...")."""
  while error.args and isinstance(error.args[0], BaseException):
    error = error.args[0]
  return " ".join(str(error.args[0] if error.args else error).split())


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


def run(main: Callable[[List[str]], Any],
        flags_parser: Callable[[List[str]], Any] = app.parse_flags_with_usage) -> None:
  """app.run(main, flags_parser=flags_parser), with help exiting 0 and the libraries'
  INFO logging hidden unless --verbosity is given (see vit_jax.console)."""
  define_help_flags()

  def quiet_main(argv):
    console.quiet_libraries(flags.FLAGS["verbosity"].present)
    try:
      return main(argv)
    except app.UsageError as e:  # absl would print the whole help text before it
      print(f"error: {e} (--help shows the usage)", file=sys.stderr)
      sys.exit(2)

  app.run(quiet_main, flags_parser=flags_parser)
