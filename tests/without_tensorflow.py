"""Runs a module as __main__ as on an install without TensorFlow (and TFDS):
python tests/without_tensorflow.py MODULE [ARGS...]. Every import finder answers "not
installed" for them, so `import tensorflow` raises ModuleNotFoundError and a probe
(importlib.util.find_spec, as etils and orbax do) finds nothing."""

import runpy
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


if __name__ == "__main__":
  sys.meta_path[:] = [_Hiding(finder) for finder in sys.meta_path]
  module = sys.argv[1]
  sys.argv = [module, *sys.argv[2:]]
  runpy.run_module(module, run_name="__main__", alter_sys=True)
