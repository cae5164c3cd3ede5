"""The main job with config.objective='mpp': pre-training on the digits with evaluation,
few-shot probes, Polyak averaging and a resume after a preemption, then fine-tuning from its
params.npz."""

import logging
import math
import os

import numpy as np
import pytest

from helpers import demo_config, load_module, read_metrics, sigterm_at_step
from vit_jax import load_npz, predict
from vit_jax.base import errors
from vit_jax.data import device_batches
from vit_jax.training import loop


def mpp_digits():
  config = load_module("mpp.py").get_config("digits")
  config.update(dict(total_steps=12, batch=32, batch_eval=128, progress_every=3,
                     eval_every=6, checkpoint_every=12, warmup_steps=2, base_lr=3e-3,
                     polyak_decay=0.5))
  config.fewshot.update(dict(shots=(1, 5), seeds=1, every_steps=6, batch_size=256))
  config.model.num_layers = 2  # MPP's programs are this test's own: two blocks compile fast
  config.lock()
  return config


def test_mpp_pretraining_then_finetuning_from_its_params(tmp_path, caplog, monkeypatch):
  workdir = str(tmp_path / "mpp")
  with monkeypatch.context() as patch:  # preempted after step 6, then resumed: one program
    patch.setattr(device_batches, "prefetch_to_device", sigterm_at_step(6))
    assert loop.train_and_evaluate(mpp_digits(), workdir)["preempted_at_step"] == 6
  with caplog.at_level(logging.INFO):
    result = loop.train_and_evaluate(mpp_digits(), workdir)
  assert "resumed from step 6" in caplog.text
  rows = read_metrics(workdir)
  evals = [r for r in rows if "eval/loss" in r]
  assert [r["step"] for r in evals] == [6, 12]
  # 300 test digits, 16 patches each, half corrupted: a per-patch evaluation.
  assert result["eval/examples"] == evals[0]["eval/examples"] == 300 * 8
  assert "eval_raw/loss" in evals[0]  # Polyak average and raw parameters both evaluated
  # The loss starts at ln(512) (zero prediction head) and goes down.
  assert evals[1]["eval/loss"] < evals[0]["eval/loss"] < math.log(512) - 0.1
  fewshot = [r for r in rows if "fewshot/digits_1shot" in r]
  assert [r["step"] for r in fewshot] == [6, 12]
  assert all(0.1 < r["fewshot/digits_5shot"] <= 1 for r in fewshot)

  module, params = load_npz(os.path.join(workdir, "params.npz"))
  assert set(params) == {"embedding", "cls", "Transformer", "head"}
  assert module.num_classes == 1 and not params["head"]["kernel"].any()
  with pytest.raises(errors.InvalidInput, match="has no trained classification head"):
    predict.check_trained_head(params, os.path.join(workdir, "params.npz"))
  assert (module.hidden_size, module.patch_size, module.num_layers) == (64, 4, 2)

  config = demo_config(pretrained=os.path.join(workdir, "params.npz"), total_steps=2,
                       eval_every=2, checkpoint_every=2, base_lr=1e-6)
  config.model.num_layers = 2  # the backbone's
  finetuned = loop.train_and_evaluate(config, str(tmp_path / "finetune"))
  assert finetuned["eval/examples"] == 300
  _, tuned = load_npz(tmp_path / "finetune" / "params.npz")
  assert tuned["head"]["kernel"].shape == (64, 10)
  # Started from the MPP backbone (lr 1e-6 barely moves it), not from a fresh init.
  _, pretrained = load_npz(os.path.join(workdir, "params.npz"))
  np.testing.assert_allclose(tuned["embedding"]["kernel"], pretrained["embedding"]["kernel"],
                             atol=1e-4)
