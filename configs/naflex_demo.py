"""The demo's small ViT from scratch as a NaFlex model: each image at its own aspect ratio.

  python -m vit_jax.main --config=configs/naflex_demo.py --workdir=/tmp/naflex_demo
  python -m vit_jax.main --config=configs/naflex_demo.py:/data/my_images --workdir=DIR

configs/demo.py's 4-block model and recipe (digits, 1,000 steps), MAP-pooled, reading each
image in at most config.pp.max_patches patches of 4 px at its own aspect ratio (16 for the
8x8 digits, 64 for a folder's images), padded to that budget, the padding masked out.
Its position table is pp.crop / 4 per side (4 x 4 on the digits), resized to each image's
grid. On the digits each step reads the whole image (pp.resize = pp.crop: the bit preset's
window is then all of it) with RandAugment (2, 5): 98.3% test accuracy at 1,000 steps.
Without RandAugment it tested at 94.0%, under the demo's 95% bar; with the bit preset's
window instead (NaFlex cuts it from the 8 px original before resizing, a 7 px window at a
1 px offset) 70.7% (benchmarks/RESULTS.md, issue 50). NaFlex with a released SigLIP 2
tower: configs/siglip2_b16_naflex.py.
"""

from vit_jax.training import config_defaults

# Patches per image: the digits' 16 px at 4 px patches; a folder's images near 32 px.
DIGITS_BUDGET, FOLDER_BUDGET = 16, 64


def get_config(dataset=None):
  config = config_defaults.demo_config(dataset)
  config.model.classifier = "map"
  if config.dataset == "digits":
    config.pp.max_patches, config.pp.resize = DIGITS_BUDGET, config.pp.crop
    config.pp.randaug = (2, 5)  # the whole digit each step: augmentation keeps it from memorising
  else:
    config.pp.max_patches = FOLDER_BUDGET
  return config
