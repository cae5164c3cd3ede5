"""The console: our lines always, the libraries' INFO chatter only on request."""

import logging
import os

import pytest
from absl import logging as absl_logging

from vit_jax import console


@pytest.fixture
def restore_levels():
  saved = absl_logging.get_verbosity(), logging.getLogger("jax").level
  yield
  absl_logging.set_verbosity(saved[0])
  logging.getLogger("jax").setLevel(saved[1])
  logging.getLogger("absl").filters.clear()


@pytest.mark.parametrize("flag, env, quiet", [(False, None, True), (True, None, False),
                                              (False, "1", False), (False, "0", True)])
def test_library_info_is_hidden_unless_asked_for(monkeypatch, restore_levels, flag, env, quiet):
  absl_logging.set_verbosity(absl_logging.INFO)
  logging.getLogger("jax").setLevel(logging.NOTSET)
  if env is None:
    monkeypatch.delenv(console.VERBOSE_ENV, raising=False)
  else:
    monkeypatch.setenv(console.VERBOSE_ENV, env)
  console.quiet_libraries(flag)
  assert (absl_logging.get_verbosity() == absl_logging.WARNING) == quiet
  assert (logging.getLogger("jax").level == logging.WARNING) == quiet


def test_our_lines_print_whatever_absl_says(capsys, restore_levels):
  absl_logging.set_verbosity(absl_logging.ERROR)
  console.log.info("step 5/10")
  console.log.warning("careful")
  err = capsys.readouterr().err.splitlines()
  assert err[0].endswith(" step 5/10") and err[1].endswith(" warning: careful")


def test_orbax_errors_are_left_to_our_one_line(restore_levels, caplog):
  """A failed background save is logged by orbax (through absl, with its traceback) from
  its thread; quiet, only the run's own error line reports it. Others' errors still show."""
  console.quiet_libraries(False)
  absl = logging.getLogger("absl")
  for folder in ("orbax", "elsewhere"):
    absl.handle(logging.LogRecord("absl", logging.ERROR, os.path.join("site", folder, "f.py"),
                                  1, f"failed in {folder}", None, None))
  absl.handle(logging.LogRecord("absl", logging.WARNING, os.path.join("site", "orbax", "f.py"),
                                1, "an orbax warning", None, None))
  assert [r.getMessage() for r in caplog.records] == ["failed in elsewhere", "an orbax warning"]
