"""Fine-tune ViT-H_14 from its ImageNet-21k checkpoint.

  python -m vit_jax.main --config=configs/vit_h14.py --workdir=DIR          # ImageNet
  python -m vit_jax.main --config=configs/vit_h14.py:cifar10 --workdir=DIR  # any dataset

As in the paper's Table 2: ImageNet, CIFAR-10/100, Pets and Flowers at 518 px with
Polyak averaging 0.9999; other datasets at 378 px (27 x 27 patches) without averaging.

Slice: fits a v3-8 with these defaults (ImageNet, the largest of its presets); check first:
  python -m vit_jax.plan --config=configs/vit_h14.py --tpu=v3-8
"""

from vit_jax.training import config_defaults


def get_config(dataset=None):
  config = config_defaults.finetune_config("ViT-H_14", dataset, headline_crop=518,
                                          headline_polyak=True)
  # A v3-8 core holds 15.48 GiB: at 518 px (1,370 tokens) the shared 8 micro-batches (8
  # images per core each) need 17.30 GiB; 16 micro-batches (4 per core) peak at 13.70 GiB,
  # with the same result, and the compiler even estimates them faster (40 vs 37 img/s: it
  # rematerialises less). python -m vit_jax.plan; benchmarks/RESULTS.md ("TPU plans").
  config.accum_steps = 16
  return config
