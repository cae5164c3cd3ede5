"""The main job with MLP-Mixers: from scratch (configs/mixer_demo.py, scanned blocks,
stochastic depth, layer decay) and fine-tuning a released-layout Mixer file at twice its
resolution (token-mixing MLPs resized) with LoRA on both MLPs; the configs' recipe."""

import numpy as np

from conftest import random_params
from helpers import DEMO_SETTINGS, load_module, write_image
from vit_jax import create_model, load_npz, save_npz
from vit_jax.training import loop, lora_adapters
from vit_jax.training import config_defaults as common

TINY = dict(patch_size=4, hidden_dim=16, num_blocks=2, tokens_mlp_dim=8, channels_mlp_dim=32)


def mixer_demo(**overrides):
  config = load_module("mixer_demo.py").get_config()
  config.update({**DEMO_SETTINGS, **overrides})
  return config


def test_from_scratch_with_scan_stochastic_depth_and_layer_decay(tmp_path):
  config = mixer_demo(layer_decay=0.8)
  config.model.update(scan_layers=True, stochastic_depth=0.1, remat_policy="full")
  result = loop.train_and_evaluate(config, str(tmp_path / "run"))
  assert result["eval/examples"] == 300
  module, params = load_npz(tmp_path / "run" / "params.npz")
  assert (module.hidden_dim, module.num_blocks, module.tokens_mlp_dim) == (64, 4, 32)
  assert sorted(k for k in params if k.startswith("MixerBlock")) == [
      f"MixerBlock_{i}" for i in range(4)]  # the released per-block layout
  parameters = (tmp_path / "run" / "parameters.txt").read_text()
  assert "MixerBlock/token_mixing/Dense_0/kernel" in parameters


def test_finetune_a_mixer_file_at_twice_its_resolution_with_lora(tmp_path):
  module = create_model("Mixer-B_16", num_classes=7, **TINY)
  save_npz(random_params(module, 16), tmp_path / "pre.npz")  # a 4x4 patch grid
  for split in ("train", "test"):  # 3 classes, 4 images each
    for name in ("cat", "dog", "fox"):
      for i in range(4):
        write_image(tmp_path / "images" / split / name / f"{i}.png", size=(48, 40))
  config = mixer_demo(dataset=str(tmp_path / "images"), pretrained=str(tmp_path / "pre.npz"),
                      total_steps=2, batch=4, batch_eval=5, eval_every=2, checkpoint_every=2)
  config.model_name = "Mixer-B_16"
  config.model = common.get_config().model  # the fine-tuning defaults: no size overrides
  config.model.update(TINY)
  config.pp.update(dict(preset="inception", crop=32, resize=None, flip=True))
  config.lora.update(rank=2, targets="_mixing/Dense_[01]/kernel$")
  result = loop.train_and_evaluate(config, str(tmp_path / "run"))
  assert result["eval/examples"] == 12
  tuned, params = load_npz(tmp_path / "run" / "params.npz")
  assert tuned.num_classes == 3 and tuned.tokens_mlp_dim == 4 * 8  # 8x8 patches: 4 copies
  kernel = params["MixerBlock_0"]["token_mixing"]["Dense_0"]["kernel"]
  assert kernel.shape == (64, 32)
  with np.load(tmp_path / "pre.npz") as base, np.load(tmp_path / "run" / "adapters.npz") as a:
    rebuilt = lora_adapters.merge(dict(base), dict(a))  # the resized token mixing is in adapters.npz
  with np.load(tmp_path / "run" / "params.npz") as merged:
    assert sorted(rebuilt) == sorted(merged.files)
    assert all(np.array_equal(rebuilt[k], merged[k]) for k in merged.files)


def test_mixer_configs_are_the_originals_recipe():
  config = load_module("mixer_base16_cifar10.py").get_config()
  assert (config.model_name, config.pretrained, config.dataset) == (
      "Mixer-B_16", "Mixer-B_16", "cifar10")
  assert (config.total_steps, config.train_split, config.pp.crop) == (10_000, "train[:98%]", 224)
  assert (config.optimizer, config.momentum, config.base_lr, config.batch) == (
      "sgd", 0.9, 0.03, 512)
  assert (config.decay_type, config.warmup_steps, config.grad_norm_clip) == ("cosine", 500, 1.0)
  assert load_module("mixer_b16.py").get_config() == config
  pets = load_module("mixer_l16.py").get_config("oxford_iiit_pet")
  assert (pets.model_name, pets.dataset, pets.pp.crop) == ("Mixer-L_16", "oxford_iiit_pet", 224)


def test_mixer_pretraining_config_is_big_vision_s_mlp_mixer_i1k():
  """configs/mixer_b16_i1k.py: big_vision's configs/mlp_mixer_i1k.py (the Mixer paper's
  ImageNet recipe), its wd mapped as for the AugReg configs (1e-4 / lr 1e-3 = 0.1)."""
  module = load_module("mixer_b16_i1k.py")
  config = module.get_config()
  assert (config.model_name, config.pretrained, config.dataset) == (
      "Mixer-B_16", None, "imagenet2012")
  assert (config.model.stochastic_depth, config.model.head_bias_init, config.loss) == (
      0.1, -6.9, "sigmoid_xent")
  assert (config.batch, config.pp.crop, config.pp.randaug, config.pp.mixup_alpha) == (
      4096, 224, (2, 15), 0.5)
  assert (config.optimizer, config.optim_dtype, config.base_lr, config.weight_decay) == (
      "adam", "float32", 0.001, 0.1)
  assert (config.warmup_steps, config.decay_type, config.linear_end, config.grad_norm_clip) == (
      10_000, "linear", 1e-5, 1.0)
  assert (config.train_split, config.evals.minival.split) == ("train[:99%]", "train[99%:]")
  assert config.total_steps == 1_268_355 * 300 // 4096
  assert module.get_config("60ep").total_steps == 1_268_355 * 60 // 4096
  assert not {"hidden_size", "num_layers"} & set(config.model)  # the Mixer's own sizes
