"""LiT (locked-image tuning) on the embedded digits: the README demo's classifier is the
image tower, locked (bit-identical after training); a text tower learns to meet its
features with the softmax loss.

  python -m vit_jax.main --config=configs/demo.py --workdir=/tmp/vit_demo      # the classifier
  python -m vit_jax.main --config=configs/lit_demo.py:/tmp/vit_demo/params.npz \
      --workdir=/tmp/lit_demo

The argument is the classifier's params.npz (default /tmp/vit_demo/params.npz, the README
demo's); its head is dropped and the image tower's pooled features are the embedding. Its
zero-shot accuracy comes within a few points of the classifier's: docs/two_towers.md.
"""

from vit_jax.families.two_tower import training_recipes
from vit_jax.training import config_defaults

CLASSIFIER = "/tmp/vit_demo/params.npz"


def get_config(classifier=CLASSIFIER):
  return training_recipes.lit_demo(config_defaults.get_config(), classifier or CLASSIFIER)
