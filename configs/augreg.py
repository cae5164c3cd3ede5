"""Train the way a released AugReg checkpoint was made ("How to train your ViT?", Steiner
et al. 2021, arXiv 2106.10270): the argument is the file's name (docs/augreg.md).

  python -m vit_jax.main --workdir=DIR --config.tfds_data_dir=TFDS_DIR \\
      --config=configs/augreg.py:S_16-i21k-300ep-lr_0.001-aug_light1-wd_0.03-do_0.0-sd_0.0
  python -m vit_jax.main --workdir=DIR --config=configs/augreg.py:S_16-i21k-300ep-lr_0.001-\\
aug_light1-wd_0.03-do_0.0-sd_0.0,/data/i21k
  python -m vit_jax.main --workdir=DIR --config=configs/augreg.py:B_16-i21k-300ep-lr_0.001-\\
aug_medium1-wd_0.1-do_0.0-sd_0.0--imagenet2012-steps_20k-lr_0.01-res_384

A pre-training name MODEL-DATA-EPOCHSep-lr_LR-aug_AUG-wd_WD-do_DO-sd_SD gives its recipe:
the model (its released pooling: the class token), AUG's RandAugment and mixup (AUGS, from
big_vision's configs/vit_i21k.py), dropout DO, stochastic depth SD, and the shared settings:
batch 4096, Adam with a bfloat16 first moment, lr LR, 10k warm-up steps, cosine decay, clip
1.0, 224 px inception crops and flips, EPOCHS epochs of the train split as steps.
  i21k (i21k_30: 30 epochs): ImageNet-21k, which TFDS does not publish: a TFDS build the user
    made (TFDS name `imagenet21k` under --config.tfds_data_dir, split `full`, whose first
    51,200 images big_vision holds out for evaluation), or ',DIR' after the name for an
    image folder (DIR/train/<class>/*, DIR/test/<class>/*). Sigmoid loss, head bias -10.
  i1k: ImageNet-1k train[:99%] (minival: train[99%:]), softmax loss, a pre_logits layer
    (big_vision's configs/vit_i1k.py: rep_size=True).
wd: this project decays by lr(step) * weight_decay * kernel (vit_jax.training.optim), big_vision by
schedule(step) * wd * kernel with its lr outside the decay; its wd = name's wd * LR (wd=0.0001
for the files named wd_0.1 with lr 0.001), so weight_decay = the name's wd, exactly.

A name with a fine-tuning suffix --DATASET-steps_Nk-lr_LR-res_RES gives that fine-tuning run
from the pre-trained file (augreg/NAME): SGD momentum 0.9, batch 512, N thousand steps, lr
LR, RES px, no dropout nor stochastic depth (the project's fine-tuning recipe otherwise,
config_defaults.finetune_config). The pre-trained file must be reachable: gs://vit_models
refuses anonymous downloads, so only a file with a Hugging Face Hub mirror
(vit_jax/checkpoints/hub_mirrors.json) or a local copy in checkpoints/augreg/ starts one;
any other is refused in one line naming the mirrored pre-training files of that model.

Slice (pre-training; check first): Ti and S on a v3-64, B on a v3-128, L on a v3-256 (64,
32 and 16 images per core; benchmarks/RESULTS.md, issue 40), e.g.
  python -m vit_jax.plan --config=configs/augreg.py:L_16-i21k-300ep-lr_0.001-aug_medium1-\\
wd_0.1-do_0.1-sd_0.1 --tpu=v3-256
"""

import os
import re

from vit_jax.checkpoints import hub_table, released
from vit_jax.families.vit import names as vit_names
from vit_jax.models import family_registry
from vit_jax.training import config_defaults

# aug level -> ((num_layers, magnitude) or None, mixup alpha): big_vision's RANDAUG_DEF and
# MIXUP_DEF (configs/vit_i21k.py); light1's randaug(2,0) is "actually not nothing".
AUGS = {
    "none": (None, 0.0),
    "light1": ((2, 0), 0.0),
    "light2": ((2, 10), 0.2),
    "medium1": ((2, 15), 0.2),
    "medium2": ((2, 15), 0.5),
    "strong1": ((2, 20), 0.5),
    "strong2": ((2, 20), 0.8),
}
# Released names also use `light0` (an R26_S_32 file's pre-training): its definition is not
# in big_vision's grid and could not be checked here, so it is not pre-trained here (its
# pre-trained file has no reachable copy either, so neither is its fine-tuning run).
UNDEFINED_AUGS = ("light0",)
# data part -> (dataset, train split, eval split, train examples, epochs or None (the name's))
I21K_HELD_OUT = 51_200  # big_vision's test/val/train-eval images at the start of `full`
DATA = {
    "i21k": ("imagenet21k", f"full[{I21K_HELD_OUT}:]", "full[:25600]",
             14_197_122 - I21K_HELD_OUT, None),
    "i21k_30": ("imagenet21k", f"full[{I21K_HELD_OUT}:]", "full[:25600]",
                14_197_122 - I21K_HELD_OUT, 30),
    "i1k": ("imagenet2012", "train[:99%]", "validation", 1_268_355, None),  # 99% of 1,281,167
}
BATCH = 4096
FINETUNE_BATCH = 512
DEFAULT = "S_16-i21k-300ep-lr_0.001-aug_light1-wd_0.03-do_0.0-sd_0.0"
_FORM = "MODEL-DATA-EPOCHSep-lr_LR-aug_AUG-wd_WD-do_DO-sd_SD[--DATASET-steps_Nk-lr_LR-res_RES]"
_NUMBER = r"(\d+(?:\.\d*)?(?:e-?\d+)?)"


def _refuse(name: str, problem: str):
  raise ValueError(f"configs/augreg.py:{name}: {problem}; a name is {_FORM}, e.g. {DEFAULT}")


def parse_pretraining(name: str) -> dict:
  """The parts of a pre-training name, or one line naming the part that is wrong."""
  parts = name.split("-")
  fields = ["model", "data", "epochs", "lr", "aug", "wd", "do", "sd"]
  if len(parts) != len(fields):
    _refuse(name, f"{len(parts)} parts where a pre-training name has {len(fields)}")
  found = dict(zip(fields, parts))
  try:
    found["model"] = family_registry.canonical_name(found["model"])
  except ValueError:
    models = [vit_names.augreg_name(m) for m in vit_names.RELEASED
              if "-" not in vit_names.augreg_name(m)]
    _refuse(name, f"unknown model {found['model']!r}; models: {', '.join(models)}")
  if found["data"] not in DATA:
    _refuse(name, f"unknown data {found['data']!r}; one of {', '.join(DATA)}")
  epochs = re.fullmatch(r"(\d+)ep", found["epochs"])
  if not epochs:
    _refuse(name, f"epochs {found['epochs']!r} must read like 300ep")
  found["epochs"] = DATA[found["data"]][4] or int(epochs[1])
  aug = found["aug"].removeprefix("aug_")
  if not found["aug"].startswith("aug_") or aug not in (*AUGS, *UNDEFINED_AUGS):
    _refuse(name, f"unknown augmentation {found['aug']!r}; one of "
            f"{', '.join('aug_' + a for a in (*AUGS, *UNDEFINED_AUGS))}")
  found["aug"] = aug
  for key in ("lr", "wd", "do", "sd"):
    value = re.fullmatch(f"{key}_{_NUMBER}", found[key])
    if not value:
      _refuse(name, f"{found[key]!r} must read like {key}_0.1")
    found[key] = float(value[1])
  return found


def parse_finetuning(suffix: str, name: str) -> dict:
  """DATASET-steps_Nk-lr_LR-res_RES -> its parts, or one line naming the wrong one."""
  match = re.fullmatch(r"(?P<dataset>[\w.:/]+)-steps_(?P<steps>\d+)(?P<k>k?)-lr_" + _NUMBER
                       + r"-res_(?P<res>\d+)", suffix)
  if not match:
    _refuse(name, f"fine-tuning part {suffix!r} must read like "
            "imagenet2012-steps_20k-lr_0.01-res_384")
  steps = int(match["steps"]) * (1000 if match["k"] else 1)
  return dict(dataset=match["dataset"], steps=steps, lr=float(match[4]), res=int(match["res"]))


def pretraining_config(parts: dict, name: str, dataset: str = None):
  """The run that produced pre-training file `name` (see the module docstring)."""
  if parts["aug"] in UNDEFINED_AUGS:
    _refuse(name, f"aug_{parts['aug']} is a released name whose recipe big_vision's grid does "
            f"not define, so it cannot be pre-trained here; "
            f"defined: {', '.join(AUGS)}")
  tfds_name, train_split, eval_split, examples, _ = DATA[parts["data"]]
  config = config_defaults.get_config()
  if dataset:  # an image folder (or another TFDS name) in place of the default
    config_defaults.with_dataset(config, dataset)
  else:
    config_defaults.with_dataset(config, tfds_name)
    config.train_split, config.eval_split = train_split, eval_split
  i21k = parts["data"].startswith("i21k")
  if not i21k and not dataset:
    config.evals.minival = {"dataset": tfds_name, "split": "train[99%:]",
                            "metric": "accuracy", "optional": False}
  config.model_name = parts["model"]
  config.pretrained = None
  config.model.dropout_rate = parts["do"]
  config.model.stochastic_depth = parts["sd"]
  config.model.representation_size = (
      None if i21k else family_registry.architecture(parts["model"]).hidden_size)
  config.model.head_bias_init = -10.0 if i21k else 0.0
  config.loss = "sigmoid_xent" if i21k else "softmax_xent"
  config_defaults.big_vision_from_scratch(config, parts["lr"], parts["wd"], BATCH)
  config.pp.randaug, config.pp.mixup_alpha = AUGS[parts["aug"]]
  config.total_steps = examples * parts["epochs"] // BATCH
  config.eval_every = 5_000
  config.checkpoint_every = 2_000
  return config


def check_reachable(name: str, pretrained_name: str) -> None:
  """One line unless the pre-trained file that fine-tuning run `name` starts from has a
  Hub mirror or a local copy (the bucket refuses anonymous downloads)."""
  url = released.family_url("augreg", pretrained_name)
  path = released.bucket_path(url)
  mirrors = hub_table.load()["mirrors"]
  if path in mirrors or os.path.exists(released.local_path(url)):
    return
  model = path[len("augreg/"):].split("-")[0]  # as the bucket spells it
  starts = [p[len("augreg/"):-len(".npz")] for p in mirrors
            if p.startswith(f"augreg/{model}-") and "--" not in p]
  itself = (f"fetch the fine-tuned file itself (python -m vit_jax.download augreg/{name}), "
            if f"augreg/{name}.npz" in mirrors else "")
  raise ValueError(
      f"configs/augreg.py:{name}: its pre-trained file {path} has no reachable copy "
      f"(gs://vit_models refuses anonymous downloads and no Hugging Face Hub repository "
      f"mirrors it); put a copy at {released.local_path(url)}, {itself}or fine-tune from a "
      f"mirrored pre-training of {model}: {', '.join(starts) or 'none'}")


def finetuning_config(parts: dict, fine: dict, pretrained_name: str):
  """The fine-tuning run of a released `...--DATASET-steps_...` file."""
  config = config_defaults.finetune_config(parts["model"], fine["dataset"])
  config.pretrained = f"augreg/{pretrained_name}"
  config.model.dropout_rate = 0.0
  config.model.stochastic_depth = 0.0
  config.polyak_decay = 0.0
  config.pp.crop = fine["res"]
  config.base_lr = fine["lr"]
  config.total_steps = fine["steps"]
  config.batch = FINETUNE_BATCH
  return config


def get_config(arg=DEFAULT):
  name, _, dataset = str(arg).strip().partition(",")
  pretrained_name, _, suffix = name.partition("--")
  parts = parse_pretraining(pretrained_name)
  if suffix:
    if dataset:
      _refuse(arg, "a fine-tuning name takes no ',DATASET': its dataset is in the name")
    fine = parse_finetuning(suffix, name)
    check_reachable(name, pretrained_name)
    return finetuning_config(parts, fine, pretrained_name)
  return pretraining_config(parts, name, dataset.strip() or None)
