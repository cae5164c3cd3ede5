"""FlexiViT training (vit_jax.training.objectives.flexi): one run of a 1-block model for patch sizes 4
and 8 on the digits, interrupted by a real SIGTERM and resumed, against the same run
uninterrupted; the export at the chosen size; the config refusals. The timm check of an
exported file is in tests/checkpoints/test_interop_torch.py."""

import contextlib
import io
import json

import jax
import numpy as np
import pytest

from conftest import random_params, tiny_model
from helpers import demo_config, load_params, sigterm_at_step
from vit_jax import load_npz
from vit_jax.base import errors
from vit_jax.data import device_batches
from vit_jax.training import loop, objectives
from vit_jax.training.objectives import flexi

SIZES, EXPORT = (4, 8), 8


def flexi_config(**overrides):
  """The digits at 16 px, a 1-block model, patch sizes 4 and 8 (16 and 4 tokens)."""
  config = demo_config(total_steps=4, checkpoint_every=2, eval_every=1000, progress_every=1,
                       **overrides)
  config.model.update(hidden_size=32, mlp_dim=64, num_heads=2, num_layers=1,
                      flexi_patch_sizes=SIZES, flexi_export_patch_size=EXPORT)
  return config


def run(workdir):
  with contextlib.redirect_stderr(io.StringIO()):
    return loop.train_and_evaluate(flexi_config(), str(workdir))


@pytest.fixture(name="uninterrupted", scope="module")
def fixture_uninterrupted(tmp_path_factory):
  workdir = tmp_path_factory.mktemp("flexi") / "run"
  return workdir, run(workdir)


def test_trains_evaluates_each_size_and_exports_the_chosen_one(uninterrupted):
  workdir, result = uninterrupted
  for size in SIZES:
    assert 0 <= result[f"eval/test/accuracy_p{size}"] <= 1
    assert result[f"eval/test/loss_p{size}"] > 0
  assert result["eval/accuracy"] == result[f"eval/test/accuracy_p{EXPORT}"]
  final = json.loads((workdir / "final_metrics.json").read_text())
  assert final["eval/test/accuracy_p4"] == result["eval/test/accuracy_p4"]
  module, params = load_npz(workdir / "params.npz")  # the released layout at patch 8
  assert module.patch_size == EXPORT and params["embedding"]["kernel"].shape[:2] == (8, 8)
  assert params["Transformer"]["posembed_input"]["pos_embedding"].shape == (1, 1 + 2 * 2, 32)


def test_sigterm_and_resume_end_with_the_uninterrupted_parameters(uninterrupted, tmp_path,
                                                                  monkeypatch):
  workdir = tmp_path / "run"
  with monkeypatch.context() as patch:
    patch.setattr(device_batches, "prefetch_to_device", sigterm_at_step(3))
    assert "preempted_at_step" in run(workdir)
  run(workdir)
  expected = load_params(uninterrupted[0])
  resumed = load_params(workdir)
  assert sorted(resumed) == sorted(expected)
  for key, value in expected.items():
    np.testing.assert_array_equal(resumed[key], value, err_msg=key)


def test_export_computes_what_the_flexible_model_computes_at_that_size():
  underlying = flexi.underlying(tiny_model(), 8)
  params = random_params(underlying, 16)
  assert params["embedding"]["kernel"].shape == (flexi.KERNEL, flexi.KERNEL, 3, 32)
  exported = flexi.export(params, 8, 16, has_cls=True)
  x = np.random.default_rng(0).uniform(-1, 1, (2, 16, 16, 3)).astype(np.float32)
  np.testing.assert_allclose(jax.jit(tiny_model(patch_size=8).apply)({"params": exported}, x),
                             jax.jit(underlying.apply)({"params": params}, x),
                             rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("overrides,message", [
    (dict(flexi_patch_sizes=(4, 5)), r"\[5\] do not divide config.pp.crop=16"),
    (dict(flexi_patch_sizes=(4, 4)), "must be distinct positive integers"),
    (dict(flexi_export_patch_size=2), "flexi_export_patch_size=2 .* is not in"),
])
def test_sizes_that_cannot_train_are_refused_in_one_line(overrides, message):
  config = flexi_config()
  config.model.update(overrides)
  with pytest.raises(errors.InvalidInput, match=message) as excinfo:
    objectives.get(config).check(config)
  assert "\n" not in str(excinfo.value)


def test_other_objectives_and_hybrids_are_refused():
  config = flexi_config(objective="mpp")
  with pytest.raises(errors.InvalidInput, match="trains a classifier"):
    objectives.get(config)
  config = flexi_config(model_name="R26+ViT-S_32")
  with pytest.raises(errors.InvalidInput, match="is a hybrid"):
    objectives.get(config).check(config)
