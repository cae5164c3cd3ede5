"""The console: our lines always, the libraries' INFO chatter only on request."""

import logging
import os
import subprocess
import sys
import time

import pytest
from absl import logging as absl_logging

import helpers
from vit_jax.base import console


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


def test_a_stage_says_what_runs_how_long_it_has_run_and_what_came_of_it(capsys):
  with console.stage("compiling the train step", heartbeat_s=0.02) as outcome:
    time.sleep(0.2)
    outcome("peak 1.00 GiB per device, fits")
  err = capsys.readouterr().err.splitlines()
  assert err[0].endswith(" compiling the train step ...")
  assert "compiling the train step: still running after 0 s" in err[1]
  assert err[-1].endswith(" compiling the train step: peak 1.00 GiB per device, fits (0 s)")
  assert [console.duration(s) for s in (8.4, 125, 3720)] == ["8 s", "2 min 05 s",
                                                             "1 h 02 min"]


def test_a_stage_ticks_while_a_library_s_stderr_is_hidden():
  """platforms.quiet_stderr hides what C++ writes to descriptor 2 during a compile; the
  elapsed time written meanwhile still reaches the terminal (a real process's stderr)."""
  code = ("import time; from vit_jax.base import console, platforms\n"
          "with console.stage('compiling', heartbeat_s=0.02):\n"
          "  with platforms.quiet_stderr():\n"
          "    time.sleep(0.2)\n")
  done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                        env=helpers.subprocess_env(), cwd=helpers.REPO, timeout=60, check=True)
  assert "compiling: still running after 0 s" in done.stderr
  assert done.stderr.splitlines()[-1].endswith(" compiling: done (0 s)")
