"""The main job end to end on small configs: outputs, resume, fine-tuning, bad input."""

import json
import logging
import os
import pathlib

import jax
import numpy as np
import pytest
from PIL import Image

from conftest import RELEASED_FIXTURES
from test_configs import load_module
from vit_jax import config_defaults as common
from vit_jax import load_npz, sharding, train

demo = load_module("demo.py")  # configs/ holds files loaded by path, not a package


def demo_config(**overrides):
  config = demo.get_config()
  config.update(dict(total_steps=6, batch=32, batch_eval=128, progress_every=2,
                     eval_every=3, checkpoint_every=3, warmup_steps=2))
  config.update(overrides)
  config.lock()
  return config


def read_metrics(workdir):
  lines = pathlib.Path(workdir, "metrics.jsonl").read_text().splitlines()
  return [json.loads(line) for line in lines]


def test_demo_run_writes_everything_and_resumes(tmp_path, caplog):
  workdir = str(tmp_path / "run")
  result = train.train_and_evaluate(demo_config(), workdir)
  assert result["eval/examples"] == 300  # 300 test digits, batch_eval 128: no remainder lost
  files = os.listdir(workdir)
  assert any(f.startswith("events.out.tfevents") for f in files)
  assert {"metrics.jsonl", "params.npz", "config.json", "checkpoints"} <= set(files)
  assert "6" in os.listdir(os.path.join(workdir, "checkpoints"))
  rows = read_metrics(workdir)
  names = set().union(*rows)
  assert {"train/loss", "train/lr", "train/grad_norm", "train/img_per_sec", "eval/loss",
          "eval/accuracy", "eval/examples"} <= names
  assert [r["step"] for r in rows if "eval/accuracy" in r] == [3, 6]
  module, params = load_npz(os.path.join(workdir, "params.npz"))
  assert module.num_classes == 10 and module.hidden_size == 64

  with caplog.at_level(logging.INFO):
    train.train_and_evaluate(demo_config(total_steps=8), workdir)
  assert "resumed from step 6" in caplog.text
  steps = [r["step"] for r in read_metrics(workdir) if "train/loss" in r]
  assert steps == [2, 4, 6, 8]  # 7 and 8 were trained; 1..6 were not repeated


def write_image_folder(root, classes=("cat", "dog", "fox"), per_class=4):
  rng = np.random.default_rng(0)
  for split in ("train", "test"):
    for c, name in enumerate(classes):
      os.makedirs(root / split / name)
      for i in range(per_class):
        pixels = (rng.uniform(0, 255, (40, 48, 3)) * 0.3 + 80 * c).astype(np.uint8)
        image = Image.fromarray(pixels)
        if i % 3 == 0:
          image.convert("L").save(root / split / name / f"{i}.png")
        elif i % 3 == 1:
          image.save(root / split / name / f"{i}.JPG")
        else:
          image.convert("RGBA").save(root / split / name / f"{i}.Png")


def test_finetune_fixture_checkpoint_on_an_image_folder(tmp_path):
  write_image_folder(tmp_path / "images")
  config = demo_config(dataset=str(tmp_path / "images"), pretrained=str(
      RELEASED_FIXTURES / "vit-ti16.npz"), total_steps=2, batch=4, batch_eval=5,
                       eval_every=2, checkpoint_every=2)
  config.unlock()
  config.model_name = "ViT-Ti_16"
  config.model = common.get_config().model  # the fine-tuning defaults, no demo overrides
  config.pp.update(dict(preset="inception", crop=32, resize=None, flip=True))
  config.optimizer, config.optim_dtype, config.base_lr = "sgd", "bfloat16", 0.01
  config.lock()
  result = train.train_and_evaluate(config, str(tmp_path / "run"))
  assert result["eval/examples"] == 12
  module, params = load_npz(tmp_path / "run" / "params.npz")
  assert module.num_classes == 3 and module.hidden_size == 192
  assert params["Transformer"]["posembed_input"]["pos_embedding"].shape == (1, 5, 192)


def test_missing_pretrained_file_fails_before_training(tmp_path):
  config = demo_config(pretrained=str(tmp_path / "missing.npz"))
  with pytest.raises(FileNotFoundError, match="missing.npz"):
    train.train_and_evaluate(config, str(tmp_path / "run"))
  assert not (tmp_path / "run" / "metrics.jsonl").exists()


def test_unknown_dataset_fails_fast(tmp_path):
  with pytest.raises((ValueError, FileNotFoundError)):
    train.train_and_evaluate(demo_config(dataset=str(tmp_path / "no_such_dir")),
                             str(tmp_path / "run"))


def test_accumulation_must_divide_the_batch(tmp_path):
  with pytest.raises(sharding.ShardingError, match="accum_steps=5 does not divide"):
    train.train_and_evaluate(demo_config(accum_steps=5), str(tmp_path / "run"))


def test_hyperrule_steps():
  assert [train.hyperrule_steps(n) for n in (1_000, 50_000, 1_000_000)] == [500, 10_000, 20_000]


def test_nan_loss_stops_and_keeps_the_last_good_checkpoint(tmp_path):
  workdir = str(tmp_path / "run")
  train.train_and_evaluate(demo_config(total_steps=2, checkpoint_every=2), workdir)
  exploding = demo_config(total_steps=12, checkpoint_every=1, progress_every=5,
                          base_lr=1e38)
  with pytest.raises(FloatingPointError, match="is (nan|inf) at step .*last good checkpoint"):
    train.train_and_evaluate(exploding, workdir)
  steps = sorted(int(d) for d in os.listdir(os.path.join(workdir, "checkpoints")) if d.isdigit())
  assert steps[-1] < 12
  module, params = load_npz(os.path.join(workdir, "params.npz"))  # from the first run
  assert all(np.isfinite(v).all() for v in jax.tree.leaves(params))
