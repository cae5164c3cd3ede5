"""ViT-S/16 from scratch on ImageNet-1k: big_vision's configs/vit_s16_i1k.py ("Better plain
ViT baselines for ImageNet-1k", Beyer, Zhai and Kolesnikov 2022, arXiv 2205.01580).

  python -m vit_jax.main --config=configs/vit_s16_i1k.py --workdir=DIR         # 90 epochs
  python -m vit_jax.main --config=configs/vit_s16_i1k.py:300ep --workdir=DIR   # any NNNep

Published: 76.5% top-1 after 90 epochs in 6-7 h on a TPU v3-8 (big_vision's config); the
report's abstract: 90 epochs "surpass 76%" in under seven hours on a TPUv3-8, 300 epochs
"reach 80% in less than one day".
Recipe: S/16 with global average pooling, the fixed 2-D sin-cos position embedding and a
pre_logits layer (rep_size=True), no class token; 224 px inception crops, flips,
RandAugment (2, 10) and mixup 0.2; batch 1024; Adam (0.9, 0.999) with a bfloat16 first
moment, lr 1e-3, 10k warm-up steps, cosine decay, clip 1.0; big_vision's wd=0.0001 is
weight_decay 0.1 here (configs/augreg.py says why). Trains on train[:99%], evaluates on
ImageNet's validation set (and ReaL / v2 where present) and on minival (train[99%:]).
Evaluation resizes the whole image to 224 px (this project's preset), where big_vision
resizes the short side to 256 and crops the central 224.

Slice: planned for a v3-8 (128 images per core; benchmarks/RESULTS.md, issue 40):
  python -m vit_jax.plan --config=configs/vit_s16_i1k.py --tpu=v3-8
"""

from vit_jax.training import config_defaults

BATCH = 1024


def get_config(arg="90ep"):
  config = config_defaults.imagenet_from_scratch(arg, "configs/vit_s16_i1k.py", BATCH)
  config.model_name = "ViT-S_16"
  config.model.classifier = "gap"
  config.model.posemb = "sincos2d"
  config.model.representation_size = 384
  config.loss = "softmax_xent"
  config_defaults.big_vision_from_scratch(config, base_lr=1e-3, weight_decay=0.1, batch=BATCH)
  config.pp.randaug = (2, 10)
  config.pp.mixup_alpha = 0.2
  config.eval_every = 2_500
  config.checkpoint_every = 1_000
  return config
