"""Fine-tune the image tower of SigLIP 2 So400m/14 (SigLIP2-So400m_14-384) as a classifier.

  python -m vit_jax.main --config=configs/siglip2_so400m14.py --workdir=DIR  # ImageNet
  python -m vit_jax.main --config=configs/siglip2_so400m14.py:/data/my_images \\
      --workdir=DIR  # a folder

Only the image tower is loaded; its MAP head is kept (--config.model.classifier=gap
averages the tokens instead) under a new zero-initialised linear head, at 378 px (any
--config.pp.crop: the position embedding is resized). SigLIP (v1) and other resolutions of
the same size: --config.pretrained=SigLIP-So400m_14-384 (or a local .npz / Hugging Face folder).
The recipe (AdamW, lr 3e-4 at batch 512, layer decay, label smoothing 0.1) is a starting
point: docs/siglip_classifiers.md. Check the slice first:
  python -m vit_jax.plan --config=configs/siglip2_so400m14.py --tpu=v3-8
"""

from vit_jax.families.two_tower import recipes
from vit_jax.training import config_defaults


def get_config(dataset=None):
  return recipes.classifier_config(config_defaults.finetune_defaults(dataset), "So400m_14")
