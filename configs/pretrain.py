"""Pre-train a ViT from scratch as in the paper (section 4.1, Table 3, App. B.1).

  python -m vit_jax.main --config=configs/pretrain.py:ViT-B_16,imagenet21k --workdir=DIR
  python -m vit_jax.main --config=configs/pretrain.py:ViT-B_16,imagenet2012 --workdir=DIR

Adam (0.9, 0.999), batch 4096, 10k linear warm-up, gradient clipping at 1, 224 px, a
pre_logits (Dense + tanh) representation layer and head bias -10.
ImageNet-21k: 90 epochs, lr 1e-3, weight decay 0.03, dropout 0.1, linear decay,
sigmoid cross-entropy (multi-label). ImageNet-1k: 300 epochs, lr 3e-3, weight decay 0.3,
dropout 0.1, cosine decay.

Slice: planned for a v3-256 (batch 4096 = 16 per core), e.g.
  python -m vit_jax.plan --config=configs/pretrain.py:ViT-L_16,imagenet21k --tpu=v3-256
"""

from vit_jax.families.vit import names as vit_names

from vit_jax.models import family_registry
from vit_jax.training import config_defaults

# dataset -> (train examples, epochs, base lr, weight decay, decay, loss, eval split)
RECIPES = {
    "imagenet21k": (14_197_122, 90, 1e-3, 0.03, "linear", "sigmoid_xent", "train[:10000]"),
    "imagenet2012": (1_281_167, 300, 3e-3, 0.3, "cosine", "softmax_xent", "validation"),
}
BATCH = 4096


def get_config(arg="ViT-B_16,imagenet2012"):
  parts = [part.strip() for part in str(arg).split(",")]
  model_name, dataset = parts if len(parts) == 2 else (None, None)
  if model_name not in vit_names.RELEASED or dataset not in RECIPES:
    raise ValueError(
        f"configs/pretrain.py takes MODEL,DATASET (e.g. "
        f"--config=configs/pretrain.py:ViT-B_16,imagenet21k), got {arg!r}; MODEL is one of "
        f"{', '.join(vit_names.RELEASED)}; DATASET is {' or '.join(RECIPES)}")
  examples, epochs, lr, weight_decay, decay, loss, eval_split = RECIPES[dataset]
  config = config_defaults.with_dataset(config_defaults.get_config(), dataset)
  config.model_name = model_name
  config.model.dropout_rate = 0.1
  config.model.representation_size = family_registry.architecture(model_name).hidden_size
  config.model.head_bias_init = -10.0
  config.pretrained = None
  config.pp.preset = "inception"
  config.pp.crop = 224
  config.train_split = "train"
  config.eval_split = eval_split
  config.optimizer = "adamw"
  config.optim_dtype = "float32"
  config.base_lr = lr
  config.weight_decay = weight_decay
  config.decay_type = decay
  config.warmup_steps = 10_000
  config.batch = BATCH
  config.batch_eval = 1024
  config.accum_steps = 1
  config.total_steps = examples * epochs // BATCH
  config.loss = loss
  config.eval_every = 5_000
  config.checkpoint_every = 2_000
  return config
