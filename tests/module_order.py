"""The order in which the README's command (`-n auto --dist loadfile`) hands out test
modules: those marked `long` first (in file order), then the rest by how long each took
the last time it ran on this machine, longest first. A worker takes a new module as it
finishes one, so the module handed out last decides how long the other worker idles at
the end (14 s of one core on the 2-core VM with the file order). A module never timed
counts as the longest.

The seconds (setup, call and teardown of each module's tests, summed) are kept in one
JSON file per machine beside the tests' compile cache, written by the process that ran
the session, and read once by it: pytest-xdist's workers get the table from it, so every
worker collects in the same order (xdist refuses workers whose collections differ)."""

import json
import os
import tempfile
from collections import defaultdict

import pytest


class ModuleOrder:
  """The plugin; `path` is the table's file."""

  def __init__(self, path: str):
    self.path = path
    self.seconds = defaultdict(float)  # this session's, by module
    self.last = None  # the table the order comes from

  def _table(self, config) -> dict:
    if self.last is None:
      workerinput = getattr(config, "workerinput", None)
      self.last = workerinput["module_seconds"] if workerinput else _read(self.path)
    return self.last

  @pytest.hookimpl(optionalhook=True)
  def pytest_configure_node(self, node):  # in the controller, for each xdist worker
    node.workerinput["module_seconds"] = self._table(node.config)

  def pytest_collection_modifyitems(self, config, items):
    last = self._table(config)
    items[:] = sorted(items, key=lambda item: _order_key(item, last))

  def pytest_runtest_logreport(self, report):  # in the controller: every worker's reports
    self.seconds[_module(report.nodeid)] += report.duration

  def pytest_sessionfinish(self, session):
    if hasattr(session.config, "workerinput") or not self.seconds:
      return
    table = {**_read(self.path), **{name: round(s, 2) for name, s in self.seconds.items()}}
    written = None
    try:
      with tempfile.NamedTemporaryFile("w", dir=os.path.dirname(self.path), delete=False,
                                       suffix=".tmp") as f:
        written = f.name
        json.dump(table, f, indent=0, sort_keys=True)
      os.replace(written, self.path)  # whole or not at all for the next session's read
    except OSError:  # a read-only or full home: the next session keeps the last table
      if written and os.path.exists(written):
        os.remove(written)


def _order_key(item, last: dict):
  """`long` modules in file order (by their seconds, two that mostly wait, test_multiprocess's
  dead peer and test_train_gcs_faults's retries, ran side by side and left both cores idle
  15 s), then the rest longest first."""
  if item.get_closest_marker("long") is not None:
    return (0, 0.0)
  return (1, -last.get(_module(item.nodeid), float("inf")))


def _module(nodeid: str) -> str:
  return nodeid.split("::", 1)[0]


def _read(path: str) -> dict:
  try:
    with open(path, encoding="utf-8") as f:
      table = json.load(f)
  except (OSError, ValueError):
    return {}
  if not isinstance(table, dict):
    return {}
  return {name: s for name, s in table.items() if isinstance(s, (int, float))}
