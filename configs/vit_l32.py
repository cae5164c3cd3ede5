"""Fine-tune ViT-L_32 from its ImageNet-21k checkpoint.

  python -m vit_jax.main --config=configs/vit_l32.py --workdir=DIR          # ImageNet at 384 px
  python -m vit_jax.main --config=configs/vit_l32.py:cifar10 --workdir=DIR  # any dataset, 384 px

Slice: fits a v3-8 with these defaults (ImageNet, the largest of its presets); check first:
  python -m vit_jax.plan --config=configs/vit_l32.py --tpu=v3-8
"""

from vit_jax.training import config_defaults


def get_config(dataset=None):
  return config_defaults.finetune_config("ViT-L_32", dataset)
