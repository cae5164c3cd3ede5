"""Fine-tune ViT-H_14 from its ImageNet-21k checkpoint.

  python -m vit_jax.main --config=configs/vit_h14.py --workdir=DIR          # ImageNet
  python -m vit_jax.main --config=configs/vit_h14.py:cifar10 --workdir=DIR  # any dataset

As in the paper's Table 2: ImageNet, CIFAR-10/100, Pets and Flowers at 518 px with
Polyak averaging 0.9999; other datasets at 378 px (27 x 27 patches) without averaging.
"""

from vit_jax import config_defaults


def get_config(dataset=None):
  return config_defaults.finetune_config("ViT-H_14", dataset, headline_crop=518,
                                        headline_polyak=True)
