"""Fine-tune ViT-H_14 from its ImageNet-21k checkpoint.

  python -m vit_jax.main --config=configs/vit_h14.py --workdir=DIR          # ImageNet at 518 px (paper Table 2)
  python -m vit_jax.main --config=configs/vit_h14.py:cifar10 --workdir=DIR  # any dataset, 384 px
"""

from vit_jax import config_defaults


def get_config(dataset=None):
  return config_defaults.finetune_config("ViT-H_14", dataset, headline_crop=518)
