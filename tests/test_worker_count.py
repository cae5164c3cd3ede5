"""The test command's worker count (tests/worker_count.py): PYTEST_XDIST_AUTO_NUM_WORKERS
decides where it is a number; another value is ignored, with a warning pytest shows."""

import pytest

import conftest
import worker_count


class _Config:
  """What the hook uses of pytest's Config: its config-time warnings."""

  def __init__(self):
    self.warnings = []

  def issue_config_time_warning(self, warning, stacklevel):  # pylint: disable=unused-argument
    self.warnings.append(warning)


def test_a_number_decides_and_anything_else_is_ignored_with_a_warning(monkeypatch):
  monkeypatch.delenv(worker_count.SETTING, raising=False)
  own = worker_count.auto_workers()
  monkeypatch.setenv(worker_count.SETTING, "7")
  assert worker_count.auto_workers() is None  # pytest-xdist reads the 7
  assert worker_count.ignored_setting() is None
  monkeypatch.setenv(worker_count.SETTING, "abc")
  config = _Config()
  assert conftest.pytest_xdist_auto_num_workers(config) == own
  [warning] = config.warnings
  assert isinstance(warning, pytest.PytestConfigWarning)
  assert str(warning) == (
      "PYTEST_XDIST_AUTO_NUM_WORKERS='abc' is not a number of workers and is ignored: -n "
      "auto starts its own count; set it to one, e.g. PYTEST_XDIST_AUTO_NUM_WORKERS=3, or "
      "unset it")
