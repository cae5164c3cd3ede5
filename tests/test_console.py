"""The console: our lines always, the libraries' INFO chatter only on request."""

import logging

import pytest
from absl import logging as absl_logging

from vit_jax import console


@pytest.fixture
def restore_levels():
  saved = absl_logging.get_verbosity(), logging.getLogger("jax").level
  yield
  absl_logging.set_verbosity(saved[0])
  logging.getLogger("jax").setLevel(saved[1])


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
