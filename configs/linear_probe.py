"""A linear probe of a released model: only the head trains, everything else is frozen
(no optimizer state, no backward pass through the backbone), the field's cheap baseline.

  python -m vit_jax.main --config=configs/linear_probe.py:cifar10 --workdir=DIR
  python -m vit_jax.main --config=configs/linear_probe.py:ViT-L_16,cifar10 --workdir=DIR

The argument is a dataset as for configs/vit_b16.py (preset, TFDS name, image folder),
optionally after a released model name and a comma, as configs/pretrain.py takes them
(default ViT-B_16). The rest is that model's fine-tuning recipe. Linear probe, then
fine-tune (LP-FT): add --config.freeze_steps=N to unfreeze the backbone after N steps.

Slice: fits a v3-8 with these defaults (ViT-B_16 on ImageNet); check first:
  python -m vit_jax.plan --config=configs/linear_probe.py --tpu=v3-8
"""

from vit_jax.families.vit import names as vit_names
from vit_jax.training import config_defaults

HEAD_ONLY = "^(?!head/)"  # every parameter path except the head's


def get_config(arg=None):
  model_name, _, dataset = (arg or "").rpartition(",")
  model_name = model_name.strip() or "ViT-B_16"
  if model_name not in vit_names.RELEASED:
    raise ValueError(f"configs/linear_probe.py takes [MODEL,]DATASET, got {arg!r}; MODEL is "
                     f"one of {', '.join(vit_names.RELEASED)}")
  config = config_defaults.finetune_config(model_name, dataset.strip() or None)
  config.freeze = HEAD_ONLY
  return config
