"""The original repository's configs/mixer_base16_cifar10.py: Mixer-B/16 from its
ImageNet-21k file on CIFAR-10 (10k steps, 224 px, train[:98%]); the same config as
configs/mixer_b16.py:cifar10.

  python -m vit_jax.main --config=configs/mixer_base16_cifar10.py --workdir=DIR

Slice: fits a v3-8; check first:
  python -m vit_jax.plan --config=configs/mixer_base16_cifar10.py --tpu=v3-8
"""

from vit_jax.families.mixer import recipes
from vit_jax.training import config_defaults


def get_config():
  return recipes.finetune_config(config_defaults.finetune_defaults("cifar10"), "Mixer-B_16")
