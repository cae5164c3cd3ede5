"""Fine-tune SigLIP 2 B/16 NaFlex (SigLIP2-B_16-NaFlex) as a classifier, each image at its
own aspect ratio.

  python -m vit_jax.main --config=configs/siglip2_b16_naflex.py:/data/my_images --workdir=DIR
  python -m vit_jax.main --config=configs/siglip2_b16_naflex.py --config.pp.max_patches=576 ...

Each image is resized, keeping its aspect ratio, to the largest size whose 16 px patch grid
holds at most config.pp.max_patches (default 256) patches, and padded to that budget; the
padding is masked out of attention and pooling, and the file's 16 x 16 position table is
resized to each image's grid. The recipe is configs/siglip2_b16.py's (AdamW, layer decay,
label smoothing): docs/siglip_classifiers.md. Check the slice first:
  python -m vit_jax.plan --config=configs/siglip2_b16_naflex.py --tpu=v3-8
"""

from vit_jax.families.two_tower import recipes
from vit_jax.training import config_defaults


def get_config(dataset=None):
  return recipes.naflex_config(config_defaults.finetune_defaults(dataset), "B_16")
