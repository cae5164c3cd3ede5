"""Fine-tune ViT-L_16 from its ImageNet-21k checkpoint.

  python -m vit_jax.main --config=configs/vit_l16.py --workdir=DIR          # ImageNet, 512 px, Polyak 0.9999 (Table 2)
  python -m vit_jax.main --config=configs/vit_l16.py:cifar10 --workdir=DIR  # any dataset, 384 px
"""

from vit_jax import config_defaults


def get_config(dataset=None):
  return config_defaults.finetune_config("ViT-L_16", dataset, headline_crop=512,
                                        headline_polyak=True)
