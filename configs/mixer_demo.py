"""configs/demo.py with a small MLP-Mixer from scratch (4 blocks, width 64, 4x4 patches) in
place of the ViT, on scikit-learn's digits or on the dataset given.

  python -m vit_jax.main --config=configs/mixer_demo.py --workdir=/tmp/mixer_demo
  python -m vit_jax.main --config=configs/mixer_demo.py:/data/my_images --workdir=DIR

Slice: anything; it fits a v3-8 as it fits a CPU:
  python -m vit_jax.plan --config=configs/mixer_demo.py --tpu=v3-8
"""

from vit_jax.families.mixer import recipes
from vit_jax.training import config_defaults


def get_config(dataset=None):
  return recipes.demo_config(config_defaults.demo_config(dataset))
