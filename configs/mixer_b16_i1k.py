"""Mixer-B/16 from scratch on ImageNet-1k: big_vision's configs/mlp_mixer_i1k.py, the public
recipe of the Mixer paper's ImageNet pre-training (Tolstikhin et al. 2021, Appendix B:
Adam, batch 4096, 10k linear warm-up then linear decay, clip 1, RandAugment, mixup and
stochastic depth).

  python -m vit_jax.main --config=configs/mixer_b16_i1k.py --workdir=DIR        # 300 epochs
  python -m vit_jax.main --config=configs/mixer_b16_i1k.py:60ep --workdir=DIR   # any NNNep

Published (big_vision's config): 76.3% top-1 after 300 epochs in 2 h 11 min on a TPU
v3-128; 60 epochs reach 70.5% in 27 min.
Recipe: Mixer-B/16 at 224 px, inception crops, flips, RandAugment (2, 15), mixup 0.5,
stochastic depth 0.1; sigmoid loss with the head's bias at -6.9 (log 1/1000); batch 4096;
Adam (0.9, 0.999) with float32 moments, lr 1e-3, 10k warm-up steps, linear decay to 1e-5,
clip 1.0; big_vision's wd=0.0001 is weight_decay 0.1 here (configs/augreg.py says why).
Trains on train[:99%], evaluates on ImageNet's validation set (and ReaL / v2 where present)
and on minival (train[99%:]). Evaluation resizes the whole image to 224 px (this
project's preset), where big_vision resizes the short side to 256 and crops 224.

Slice: a v3-128, as published (32 images per core; benchmarks/RESULTS.md, issue 48):
  python -m vit_jax.plan --config=configs/mixer_b16_i1k.py --tpu=v3-128
"""

from vit_jax.training import config_defaults

BATCH = 4096


def get_config(arg="300ep"):
  config = config_defaults.imagenet_from_scratch(arg, "configs/mixer_b16_i1k.py", BATCH)
  config.model_name = "Mixer-B_16"
  config.model.stochastic_depth = 0.1
  config.model.head_bias_init = -6.9
  config.loss = "sigmoid_xent"
  config_defaults.big_vision_from_scratch(config, base_lr=1e-3, weight_decay=0.1, batch=BATCH)
  config.optim_dtype = "float32"  # big_vision's scale_by_adam keeps float32 moments here
  config.decay_type, config.linear_end = "linear", 1e-5
  config.pp.randaug = (2, 15)
  config.pp.mixup_alpha = 0.5
  config.eval_every = 2_500
  config.checkpoint_every = 1_000
  return config
