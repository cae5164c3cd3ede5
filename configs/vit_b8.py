"""Fine-tune ViT-B_8 from its ImageNet-21k checkpoint.

  python -m vit_jax.main --config=configs/vit_b8.py --workdir=DIR          # ImageNet at 384 px
  python -m vit_jax.main --config=configs/vit_b8.py:cifar10 --workdir=DIR  # any dataset, 384 px

Slice: fits a v3-8 with these defaults (ImageNet, the largest of its presets); check first:
  python -m vit_jax.plan --config=configs/vit_b8.py --tpu=v3-8
"""

from vit_jax.training import config_defaults


def get_config(dataset=None):
  config = config_defaults.finetune_config("ViT-B_8", dataset)
  # At 384 px B/8 sees 2,305 tokens: evaluating 64 images per v3 core needs 17.63 GiB of the
  # 15.48 a core has, 32 per core fit (python -m vit_jax.plan; the train step's micro-batch
  # of 8 per core peaks at 14.32 GiB). Evaluation batches change no result, only speed.
  config.batch_eval = 256
  return config
