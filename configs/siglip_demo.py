"""SigLIP on the embedded digits: an image tower and a text tower trained from scratch with
the sigmoid loss (chunked over the devices), no download.

  python -m vit_jax.main --config=configs/siglip_demo.py --workdir=/tmp/siglip_demo
  python -m vit_jax.zeroshot --checkpoint=/tmp/siglip_demo/params.npz \
      --classes=zero,one,two,three,four,five,six,seven,eight,nine --templates='a digit {}' IMAGE...

Each training image's caption is drawn from its class name's variants ("seven", "7",
"septet") in one of six templates ("a handwritten {}."); a WordPiece vocabulary is trained
on those captions into WORKDIR/vocab.txt. The zero-shot evaluator (zeroshot/zeroshot/top1)
scores the test split against prompts no caption ever was ("a photo of the number seven.").
On a 2-core CPU: docs/two_towers.md, "Training", and benchmarks/RESULTS.md.
"""

from vit_jax.families.two_tower import training_recipes
from vit_jax.training import config_defaults


def get_config():
  return training_recipes.siglip_demo(config_defaults.get_config())
