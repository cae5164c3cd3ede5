"""Every config file builds, is complete, and says what the paper says."""

import pathlib
import re
import runpy

import pytest
import setuptools

from helpers import load_module
from vit_jax.base import config_checks
from vit_jax.models import family_registry
from vit_jax.training import config_defaults

REPO = pathlib.Path(__file__).resolve().parents[1]
CONFIG_DIR = REPO / "configs"
ALL_CONFIGS = sorted(p.name for p in CONFIG_DIR.glob("*.py"))
FROM_SCRATCH = ("vit_s16_i1k.py",)  # tests/test_configs_augreg.py
MODEL_CONFIGS = sorted(p.name for p in CONFIG_DIR.glob("*vit*.py") if p.name not in FROM_SCRATCH)
REFERENCE_KEYS = ["dataset", "pretrained", "total_steps", "warmup_steps", "base_lr",
                  "decay_type", "batch", "batch_eval", "accum_steps", "grad_norm_clip",
                  "pp.crop", "eval_every", "checkpoint_every", "progress_every", "seed"]



def load(spec):
  """Like --config=configs/FILE[:ARG]: runs FILE's get_config(ARG)."""
  file, _, arg = spec.partition(":")
  module = load_module(file)
  return module.get_config(arg) if arg else module.get_config()


# Configs whose argument is required (the user's data): loaded with one.
REQUIRED_ARGUMENT = {"siglip_finetune.py": "/data/captions.tsv"}


@pytest.mark.parametrize("name", ALL_CONFIGS)
def test_every_config_file_loads_by_path(name):
  argument = REQUIRED_ARGUMENT.get(name)
  assert load(f"{name}:{argument}" if argument else name).dataset


@pytest.mark.parametrize("name", MODEL_CONFIGS)
def test_model_config_headline_and_dataset_argument(name):
  headline = load(name)
  assert family_registry.canonical_name(headline.model_name) == headline.model_name
  assert headline.dataset == "imagenet2012" and headline.total_steps == 20_000
  cifar = load(f"{name}:cifar10")
  assert (cifar.dataset, cifar.train_split, cifar.pp.crop) == (
      "cifar10", "train[:98%]", headline.pp.crop)  # Table 2's datasets share the resolution
  folder = load(f"{name}:/data/my_images")
  assert folder.dataset == "/data/my_images" and folder.total_steps == config_checks.HYPERRULE


def test_reference_key_names_exist():
  config = config_defaults.get_config()
  for key in REFERENCE_KEYS:
    node = config
    for part in key.split("."):
      node = node[part]


def test_finetuning_recipe_matches_the_paper():
  config = load("vit_b16.py:cifar10")
  assert (config.optimizer, config.momentum, config.optim_dtype) == ("sgd", 0.9, "bfloat16")
  assert (config.batch, config.grad_norm_clip, config.weight_decay) == (512, 1.0, 0.0)
  assert (config.decay_type, config.warmup_steps, config.total_steps) == ("cosine", 500, 10_000)
  assert load("vit_l16.py").pp.crop == 512 and load("vit_h14.py").pp.crop == 518
  assert load("vit_l16.py").model.dropout_rate == 0.1
  # Table 2: L/16 and H/14 at 512 / 518 px with Polyak averaging 0.9999 on its datasets.
  for dataset in ("", ":cifar10", ":cifar100", ":oxford_iiit_pet", ":oxford_flowers102"):
    assert load(f"vit_l16.py{dataset}").polyak_decay == 0.9999
    assert load(f"vit_h14.py{dataset}").pp.crop == 518
  for other in ("vit_l16.py:svhn_cropped", "vit_l16.py:/data/my_images", "vit_b16.py"):
    assert load(other).polyak_decay == 0.0
  assert load("vit_l16.py:svhn_cropped").pp.crop == load("vit_b16.py").pp.crop == 384


def test_pretraining_recipe_matches_the_paper():
  config = load("pretrain.py:ViT-B_16,imagenet21k")
  assert (config.optimizer, config.adam_b1, config.adam_b2) == ("adamw", 0.9, 0.999)
  assert (config.batch, config.warmup_steps, config.decay_type) == (4096, 10_000, "linear")
  assert (config.weight_decay, config.base_lr, config.pp.crop) == (0.03, 1e-3, 224)
  assert config.model.representation_size == 768 and config.model.head_bias_init == -10.0
  assert config.total_steps == 14_197_122 * 90 // 4096
  assert load("pretrain.py:ViT-L_16,imagenet2012").weight_decay == 0.3
  for bad in ("ViT-B_16,jft", "ViT-B_16", "ViT-X_16,imagenet2012", "ViT-B_16,imagenet2012,x"):
    with pytest.raises(ValueError, match=(
        r"^configs/pretrain.py takes MODEL,DATASET \(e.g. "
        r"--config=configs/pretrain.py:ViT-B_16,imagenet21k\), got '.*'; MODEL is one of "
        r"ViT-Ti_16, .*; DATASET is imagenet21k or imagenet2012$")):
      load(f"pretrain.py:{bad}")


def test_configs_are_locked_against_typos():
  config = load("demo.py")
  config.lock()
  with pytest.raises(AttributeError):
    config.bacth = 3


def test_demo_takes_a_dataset_like_the_model_configs():
  digits = load("demo.py")
  assert (digits.dataset, digits.pp.crop, digits.pp.flip, digits.total_steps) == (
      "digits", 16, False, 1_000)
  assert load("demo.py:digits") == digits
  folder = load("demo.py:/data/my_images")
  assert (folder.dataset, folder.train_split, folder.eval_split) == ("/data/my_images",
                                                                    "train", "test")
  assert folder.total_steps == config_checks.HYPERRULE and folder.pretrained is None
  assert (folder.pp.crop, folder.pp.flip, folder.model) == (32, True, digits.model)
  cifar = load("demo.py:cifar10")
  assert (cifar.train_split, cifar.total_steps) == ("train[:98%]", 10_000)


def test_setup_installs_no_top_level_configs_package(monkeypatch):
  """A top-level `configs` in site-packages would collide with other projects'."""
  captured = {}
  monkeypatch.setattr(setuptools, "setup", lambda **kwargs: captured.update(kwargs))
  monkeypatch.chdir(REPO)
  runpy.run_path(str(REPO / "setup.py"))
  packages = captured["packages"]
  assert "vit_jax" in packages and "vit_jax.models" in packages
  assert all(p == "vit_jax" or p.startswith("vit_jax.") for p in packages), packages


def test_linear_probe_freezes_all_but_the_head_of_a_released_model():
  probe = load("linear_probe.py:ViT-L_16,cifar10")
  assert (probe.model_name, probe.pretrained, probe.dataset) == ("ViT-L_16", "ViT-L_16",
                                                                 "cifar10")
  assert re.search(probe.freeze, "Transformer/encoder_norm/scale")
  assert not re.search(probe.freeze, "head/kernel") and probe.freeze_steps is None
  assert load("linear_probe.py:oxford_iiit_pet").model_name == "ViT-B_16"
  with pytest.raises(ValueError, match="takes \\[MODEL,\\]DATASET"):
    load("linear_probe.py:ViT-X_99,cifar10")
