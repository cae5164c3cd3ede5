"""Fine-tune ViT-H_14 from its ImageNet-21k checkpoint.

  python -m vit_jax.main --config=configs/vit_h14.py --workdir=DIR          # ImageNet, 518 px, Polyak 0.9999 (Table 2)
  python -m vit_jax.main --config=configs/vit_h14.py:cifar10 --workdir=DIR  # any dataset, 384 px
"""

from vit_jax import config_defaults


def get_config(dataset=None):
  return config_defaults.finetune_config("ViT-H_14", dataset, headline_crop=518,
                                        headline_polyak=True)
