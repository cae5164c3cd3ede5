"""The embedded default: a small ViT trained from scratch on scikit-learn's digits.

  python -m vit_jax.main --config=configs/demo.py --workdir=/tmp/vit_demo
  python -m vit_jax.main --config=configs/demo.py:/data/my_images --workdir=DIR
  python -m vit_jax.main --config=configs/demo.py:cifar10 --workdir=DIR

1,797 real 8x8 handwritten digits ship inside scikit-learn, so this runs anywhere
with no download. The same main job as the paper configs: tf.data pipeline,
sharded train step, evaluation, orbax checkpoints, metrics.jsonl, params.npz.

The optional argument is a dataset: an image directory (train/ and test/ with one folder
per class), a TFDS name or 'digits'. It trains the same 4-block model from scratch, now at
32 px (digits: 16 px) with horizontal flips, for the dataset preset's steps (cifar10: 10k)
or else BiT's HyperRule length from the train split size (500 steps under 20k images).
That is a quick, CPU-sized check that a folder trains end to end; 32 px is small for
photos and a from-scratch model is weak on them: for accuracy, fine-tune a pre-trained
model instead (`--config=configs/vit_b16.py:/data/my_images`, 384 px).

Slice: anything; it fits a v3-8 as it fits a CPU:
  python -m vit_jax.plan --config=configs/demo.py --tpu=v3-8
"""

from vit_jax.training import config_defaults


def get_config(dataset=None):
  return config_defaults.demo_config(dataset)
