"""The embedded default: a small ViT trained from scratch on scikit-learn's digits.

  python -m vit_jax.main --config=configs/demo.py --workdir=/tmp/vit_demo

1,797 real 8x8 handwritten digits ship inside scikit-learn, so this runs anywhere
with no download. The same main job as the paper configs: tf.data pipeline,
sharded train step, evaluation, orbax checkpoints, metrics.jsonl, params.npz.
"""

from vit_jax import config_defaults


def get_config():
  config = config_defaults.get_config()
  config.dataset = "digits"
  config.train_split = "train"
  config.eval_split = "test"
  config.pretrained = None

  # A 4-block ViT on 16x16 inputs cut into 4x4 patches (16 tokens + class token).
  config.model_name = "ViT-Ti_16"
  config.model.patch_size = 4
  config.model.hidden_size = 64
  config.model.mlp_dim = 128
  config.model.num_heads = 4
  config.model.num_layers = 4

  # Digits are tiny and not mirror-symmetric: resize 8 -> 18, random 16 crop, no flip.
  config.pp.preset = "bit"
  config.pp.resize = 18
  config.pp.crop = 16
  config.pp.flip = False

  config.optimizer = "adamw"
  config.optim_dtype = "float32"
  config.base_lr = 1e-3
  config.weight_decay = 1e-4
  config.warmup_steps = 100
  config.total_steps = 1_000
  config.batch = 128
  config.batch_eval = 128
  config.accum_steps = 1

  config.progress_every = 50
  config.eval_every = 250
  config.checkpoint_every = 500
  return config
