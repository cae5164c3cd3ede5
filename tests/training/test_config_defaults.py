"""vit_jax.training.config_defaults: keys whose refusals advise None take None as typed on
the main job's command line (ml_collections' config flag parses an int field's 'None' as a
bad int), and what they then hold is checked where it is used (data.datasets.check_pp)."""

import pytest

import helpers
from vit_jax.data import datasets


def parsed(monkeypatch, *overrides):
  return helpers.parsed_config(monkeypatch, "demo.py", *overrides)


def test_pp_resize_takes_none_and_sides_as_typed(monkeypatch):
  config = parsed(monkeypatch, "--config.pp.resize=None", "--config.pp.preset=inception")
  assert config.pp.resize is None
  datasets.check_pp(config.pp)  # the advice of the refusal below, followed
  assert parsed(monkeypatch, "--config.pp.resize=24").pp.resize == 24
  with pytest.raises(ValueError, match=r"pp.resize=18 applies to the bit preset only: pass "
                     r"--config.pp.resize=None for pp.preset='inception'"):
    datasets.check_pp(parsed(monkeypatch, "--config.pp.preset=inception").pp)
  with pytest.raises(ValueError, match=r"^config.pp.resize='abc' must be a side in pixels "):
    datasets.check_pp(parsed(monkeypatch, "--config.pp.resize=abc").pp)
