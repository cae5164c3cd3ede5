"""Runs a module as __main__ as on an install without TensorFlow (and TFDS):
python tests/without_tensorflow.py MODULE [ARGS...] [--then MODULE [ARGS...]]... (one
process for several commands: each start costs seconds). Every import finder answers "not
installed" for them, so `import tensorflow` raises ModuleNotFoundError and a probe
(importlib.util.find_spec, as etils and orbax do) finds nothing."""

import importlib
import os
import sys

BLOCKED = ("tensorflow", "tensorflow_datasets")


class _Hiding:
  """A finder that finds what `finder` does, except the blocked packages."""

  def __init__(self, finder):
    self._finder = finder

  def find_spec(self, name, path=None, target=None):
    if name.split(".")[0] in BLOCKED:
      return None
    return self._finder.find_spec(name, path, target)

  def __getattr__(self, name):
    return getattr(self._finder, name)


def run(module: str, args) -> None:
  """Runs `python -m module args` here (helpers.exit_code_in_process: its own flags); a
  non-zero exit ends this process with it."""
  from helpers import exit_code_in_process  # pylint: disable=import-outside-toplevel
  code = exit_code_in_process(importlib.import_module(module), *args)
  if code:
    sys.exit(code)


if __name__ == "__main__":
  sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # helpers
  sys.meta_path[:] = [_Hiding(finder) for finder in sys.meta_path]
  commands, arguments = [], sys.argv[1:]
  while "--then" in arguments:
    cut = arguments.index("--then")
    commands.append(arguments[:cut])
    arguments = arguments[cut + 1:]
  for module, *args in commands + [arguments]:
    run(module, args)
  print("tensorflow imported:", any(name.split(".")[0] in BLOCKED for name in sys.modules))
