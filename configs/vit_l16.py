"""Fine-tune ViT-L_16 from its ImageNet-21k checkpoint.

  python -m vit_jax.main --config=configs/vit_l16.py --workdir=DIR          # ImageNet
  python -m vit_jax.main --config=configs/vit_l16.py:cifar10 --workdir=DIR  # any dataset

As in the paper's Table 2: ImageNet, CIFAR-10/100, Pets and Flowers at 512 px with
Polyak averaging 0.9999; other datasets at 384 px without averaging.

Slice: fits a v3-8 with these defaults (ImageNet, the largest of its presets); check first:
  python -m vit_jax.plan --config=configs/vit_l16.py --tpu=v3-8
"""

from vit_jax.training import config_defaults


def get_config(dataset=None):
  return config_defaults.finetune_config("ViT-L_16", dataset, headline_crop=512,
                                        headline_polyak=True)
