"""Fine-tune SigLIP 2 So400m/16 NaFlex (SigLIP2-So400m_16-NaFlex) as a classifier, each
image at its own aspect ratio.

  python -m vit_jax.main --config=configs/siglip2_so400m16_naflex.py:/data/my_images --workdir=DIR
  python -m vit_jax.main --config=configs/siglip2_so400m16_naflex.py \\
      --config.pp.max_patches=1024 ...

As configs/siglip2_b16_naflex.py, with the So400m tower (width 1152, 27 blocks, 16 px
patches; configs/siglip2_so400m14.py's recipe). Budgets 576 and 1024 on a v3-8:
benchmarks/RESULTS.md (issue 50). Check the slice first:
  python -m vit_jax.plan --config=configs/siglip2_so400m16_naflex.py \\
      --config.pp.max_patches=576 --tpu=v3-8
"""

from vit_jax.families.two_tower import recipes
from vit_jax.training import config_defaults


def get_config(dataset=None):
  return recipes.naflex_config(config_defaults.finetune_defaults(dataset), "So400m_16")
