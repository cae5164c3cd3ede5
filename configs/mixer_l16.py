"""Fine-tune Mixer-L_16 from its ImageNet-21k file, the original repository's recipe.

  python -m vit_jax.main --config=configs/mixer_l16.py --workdir=DIR           # CIFAR-10
  python -m vit_jax.main --config=configs/mixer_l16.py:oxford_iiit_pet --workdir=DIR

SGD momentum 0.9, batch 512, cosine decay after 500 warm-up steps, lr 0.03, clip 1, 224 px;
CIFAR-10: 10,000 steps on train[:98%]. At 448 px (--config.pp.crop=448) the token-mixing
MLPs are initialised block-diagonally from the 224 px ones (docs/mixer.md).

Slice: fits a v3-8 with these defaults; check first:
  python -m vit_jax.plan --config=configs/mixer_l16.py --tpu=v3-8
"""

from vit_jax.families.mixer import recipes
from vit_jax.training import config_defaults


def get_config(dataset=None):
  return recipes.finetune_config(
      config_defaults.finetune_defaults(dataset, recipes.DATASET), "Mixer-L_16")
