"""Self-supervised pre-training by masked patch prediction (paper section 4.6, App. B.1.2).

  python -m vit_jax.main --config=configs/mpp.py:imagenet2012 --workdir=DIR
  python -m vit_jax.main --config=configs/mpp.py:digits --workdir=/tmp/mpp_digits

The paper's run (on JFT; any TFDS name or image directory here): ViT-B/16 from scratch,
224 px, batch 4096, Adam (0.9, 0.999) lr 2e-4, 10k linear warm-up then cosine decay,
1M steps, gradient clipping at 1, weight decay 0.1 and no dropout (its JFT pre-training
settings, Table 3). Half of each image's patches are corrupted (80% [mask], 10% another
patch, 10% unchanged) and their 3-bit mean colours (512 classes) predicted; config.mpp
has the other targets and rates. Labels are not used. 1M steps is ~14 epochs of JFT but
~3,200 of ImageNet-1k: pass --config.total_steps to shorten.

`digits` is the embedded miniature: the demo's 4-block ViT (hidden 64, 4x4 patches,
16 patches at 16 px) on the 1,497 unlabelled training digits, with the demo's optimiser
and few-shot probes of its features on the digits; minutes on a CPU. Fine-tune its
result with the demo's settings:

  python -m vit_jax.main --config=configs/demo.py \
      --config.pretrained=/tmp/mpp_digits/params.npz --workdir=/tmp/mpp_digits_ft

params.npz is a plain ViT checkpoint (the [mask] embedding and prediction head are
dropped, a zero 1-class head stands in for the classifier).

Slice: the ImageNet run is planned for a v3-256 (batch 4096 = 16 per core):
  python -m vit_jax.plan --config=configs/mpp.py:imagenet2012 --tpu=v3-256
"""

from vit_jax.training import config_defaults

BATCH = 4096


def get_config(dataset="imagenet2012"):
  if dataset in ("digits", ""):
    config = config_defaults.demo_config("digits")
    config.fewshot.datasets = ("digits",)
    config.fewshot.every_steps = 500
  else:
    config = config_defaults.with_dataset(config_defaults.get_config(), dataset)
    config.model_name = "ViT-B_16"
    config.model.dropout_rate = 0.0
    config.pp.preset = "inception"
    config.pp.crop = 224
    config.train_split = "train"
    config.optimizer = "adamw"
    config.optim_dtype = "float32"
    config.base_lr = 2e-4
    config.adam_b1, config.adam_b2 = 0.9, 0.999
    config.weight_decay = 0.1
    config.decay_type = "cosine"
    config.warmup_steps = 10_000
    config.total_steps = 1_000_000
    config.grad_norm_clip = 1.0
    config.batch = BATCH
    config.batch_eval = 1024
    config.accum_steps = 1
    config.eval_every = 5_000
    config.checkpoint_every = 2_000
  config.pretrained = None
  config.objective = "mpp"
  # The fine-tuning presets' extra sets (ImageNet ReaL, V2) judge class predictions,
  # which pre-training does not make; its loss and accuracy come from the eval split.
  config.evals = {}
  return config
