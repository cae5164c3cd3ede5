"""Defaults shared by every experiment (configs/*.py), the dataset presets and the demo.

They live in the package, not in configs/, so that an installed vit_jax has them (the
notebook, `import vit_jax.training.config_defaults`) and installs no top-level `configs` package;
the files in configs/ are thin, loaded by path (`--config=configs/vit_b16.py:cifar10`).

The fine-tuning recipe is the paper's (App. B.1.1) as run by the reference code:
SGD momentum 0.9 (bfloat16 buffer), batch 512, no weight decay, global-norm clip 1,
cosine decay with 500 warm-up steps, 384 px. Key names follow the reference
vision_transformer configs where they exist.
"""

import re

import ml_collections

from vit_jax.base import config_checks
from vit_jax.data import VTAB_PREFIX
from vit_jax.models import family_registry

# name -> (train split, eval split, total steps). Train splits hold out the paper's dev
# portion (2% CIFAR, 1% ImageNet, 10% Pets/Flowers); evaluation is on the official split.
DATASET_PRESETS = {
    "cifar10": ("train[:98%]", "test", 10_000),
    "cifar100": ("train[:98%]", "test", 10_000),
    "imagenet2012": ("train[:99%]", "validation", 20_000),
    "oxford_iiit_pet": ("train[:90%]", "test", 500),
    "oxford_flowers102": ("train[:90%]", "test", 500),
}
# Any other TFDS name or an image directory: 'train' / 'test' and BiT's HyperRule length
# (config_checks.HYPERRULE).
# Extra evaluation sets of a preset (config.evals), evaluated when their data is present:
# ImageNet fine-tuning also reports ReaL (paper Table 2) and ImageNet-V2.
EVAL_PRESETS = {
    "imagenet2012": {
        "real": {"dataset": "imagenet2012_real", "split": "validation", "metric": "real",
                 "optional": True},
        "v2": {"dataset": "imagenet_v2", "split": "test", "metric": "accuracy",
               "optional": True},
    },
}
# VTAB-1k tasks ('vtab/<task>', see vit_jax.data.sources.vtab_tasks): the paper's setting for all 19
# (App. B.1.1): train on the 1,000 examples, evaluate on test, lr 0.01, 2,500 steps.
VTAB_PRESET = ("train800val200", "test", 2_500)
VTAB_LR = 0.01
# Few-shot probes: big_vision's ridge. Features are O(1) per dimension, so a feature vector's
# squared norm is O(D) ~ 10^3: the ridge then matters at 1-5 shots (a stable, centroid-like
# solution) and fades as the shots add data.
FEWSHOT_SHOTS = (1, 5, 10, 25)
FEWSHOT_L2_REG = 2.0**10


def get_config() -> ml_collections.ConfigDict:
  """The shared defaults; model configs override model_name/pretrained/dataset."""
  config = ml_collections.ConfigDict()
  _add_model_keys(config)
  _add_data_keys(config)
  _add_optimisation_keys(config)
  _add_fine_tuning_keys(config)
  _add_objective_keys(config)
  _add_devices_and_cadence_keys(config)
  return config


def _add_model_keys(config: ml_collections.ConfigDict) -> None:
  """The model: a released name, its overrides, its fast paths, and where it starts from."""
  # Model: a released name plus attribute overrides (see vit_jax.create_model).
  config.model_name = "ViT-B_16"
  config.model = ml_collections.ConfigDict()
  config.model.dropout_rate = 0.0
  # Stochastic depth: block i's residual branches dropped per example with probability
  # stochastic_depth * i / (num_layers - 1) in training (vit_jax.families.vit.model); 0 = off.
  config.model.stochastic_depth = 0.0
  # Another patch size than model_name's (plain ViTs; None: the model's own): a pretrained
  # kernel is PI-resized to it (FlexiViT) and its position embedding to the new grid.
  config.model.patch_size = ml_collections.FieldReference(None, field_type=int)
  config.model.representation_size = ml_collections.FieldReference(None, field_type=int)
  config.model.head_bias_init = 0.0
  # Fast paths (same function, same parameters): jax.nn.dot_product_attention (dot_product:
  # cuDNN flash attention on GPUs in bf16, XLA elsewhere; xla | cudnn force one; softmax is
  # the explicit reference math) and per-block rematerialisation (none | full | dots |
  # dots_no_batch).
  config.model.attention_impl = "dot_product"
  # cuDNN pads odd token counts to even for its backward pass; True skips the padding
  # where no gradient is taken (evaluation, prediction): ~3% faster B/16 inference.
  config.model.unpadded_inference = True
  config.model.remat_policy = "none"
  # FP8 matmuls in the encoder blocks' dense layers (Hopper GPUs run them at twice the bf16
  # rate; vit_jax.models.fp8): same parameters and checkpoints, FP8 rounding in training.
  config.model.fp8 = False
  # nn.scan over the blocks: one compiled block (fast compiles for deep models), params
  # stacked (train-state checkpoints too: resume with the same setting); params.npz and
  # load_npz keep the released per-block layout.
  config.model.scan_layers = False
  # FlexiViT (vit_jax.training.objectives.flexi): patch sizes to train one model for, e.g.
  # (8, 10, 12, 15, 16, 20, 24, 30, 40, 48) at 240 px; empty: one fixed patch size. The run
  # evaluates at each and writes params.npz at flexi_export_patch_size (None: patch_size).
  config.model.flexi_patch_sizes = ()
  config.model.flexi_export_patch_size = ml_collections.FieldReference(None, field_type=int)
  config.dtype = "float32"  # compute dtype: float32 | bfloat16 (params stay float32)
  # Checkpoint to start from: local path, gs:// URL, `FAMILY/NAME`, hf-hub:ORG/NAME or a
  # bare released name (ViT-B_16): its ImageNet-21k file, imagenet21k/NAME or for seven
  # models an AugReg one (checkpoints/released.py), fetched from its Hugging Face Hub
  # mirror into checkpoints/ on first use (checkpoints/hub.py). None: from scratch.
  config.pretrained = ml_collections.FieldReference(None, field_type=str)
  # A pretrained file with NaN/Inf weights is refused (naming the arrays); True loads it.
  config.allow_nonfinite_pretrained = False


def _add_data_keys(config: ml_collections.ConfigDict) -> None:
  """The data: the dataset, its splits and evaluation sets, the loader and preprocessing."""
  config.dataset = "cifar10"  # TFDS name, image directory, or 'digits' (embedded)
  config.train_split = "train[:98%]"
  config.eval_split = "test"
  # More evaluators, any number of each kind: name -> {type, ...its settings}
  # (vit_jax.training.evaluators). type 'classification' (the default when left out): an
  # evaluation set logged as eval/<name>/{accuracy,loss,examples} next to the dataset's own
  # eval split (named after it: 'test', 'validation'), with dataset (TFDS name, directory
  # or 'digits'), split, metric ('accuracy' | 'real': ImageNet ReaL labels), optional (True:
  # skipped with a note when its data is absent). The primary set (eval_primary; '' = the
  # dataset's own split) also writes the plain eval/accuracy. type 'fewshot': linear probes
  # logged as <name>/<dataset>_<k>shot, with config.fewshot's keys (fewshot_settings).
  config.evals = ml_collections.ConfigDict()
  config.eval_primary = ""
  # The TFDS feature holding the labels: a ClassLabel, or a list of them (multi-label).
  config.label_feature = "label"
  config.tfds_data_dir = ml_collections.FieldReference(None, field_type=str)
  config.tfds_manual_dir = ml_collections.FieldReference(None, field_type=str)
  config.tfds_download = False  # True: download_and_prepare missing TFDS data
  config.shuffle_buffer = 50_000  # streamed (large) TFDS datasets only
  # The input pipeline: 'tf' (tf.data) or 'grain' (Grain, no TensorFlow: docs/grain.md),
  # with config.grain_workers worker processes decoding and augmenting (0: in this process).
  config.loader = "tf"
  config.grain_workers = 0
  # A resume refuses data whose fingerprint changed since the run started (dataset.json:
  # images added, removed or moved between classes); True resumes on it, recording that.
  config.allow_data_change = False
  config.pp = ml_collections.ConfigDict()
  config.pp.preset = "inception"  # inception (reference fine-tuning) | bit (HyperRule)
  config.pp.crop = 384
  # bit only; typed as object so that the command line takes --config.pp.resize=None too
  config.pp.resize = ml_collections.FieldReference(None, field_type=object)
  config.pp.flip = True
  config.pp.mixup_alpha = 0.0
  # (num_layers, magnitude): big_vision's RandAugment on train crops, e.g. (2, 15); None = off.
  config.pp.randaug = ml_collections.FieldReference(None, field_type=tuple)
  # NaFlex (docs/: "NaFlex in the main job"): each image resized at its own aspect
  # ratio to at most this many patches, padded to it; the model is a NaFlexViT (a MAP head
  # and a learned position table required). 0 = the square pp.crop; None = the budget
  # config.pretrained records (a NaFlex run's params.npz), else the square pp.crop
  # (training/pretrained_file.with_budget). Typed as object so that the command line
  # takes --config.pp.max_patches=None as well as =256.
  config.pp.max_patches = ml_collections.FieldReference(None, field_type=object)


def _add_optimisation_keys(config: ml_collections.ConfigDict) -> None:
  """The optimizer, its schedule, the batch and the loss."""
  config.optimizer = "sgd"  # sgd | adam | adamw
  config.momentum = 0.9
  config.optim_dtype = "bfloat16"  # dtype of the momentum / first-moment buffer
  config.adam_b1 = 0.9
  config.adam_b2 = 0.999
  config.weight_decay = 0.0
  config.base_lr = 0.03
  config.decay_type = "cosine"  # cosine | linear | constant
  config.linear_end = 1e-5
  config.warmup_steps = 500
  config.total_steps = 10_000  # -1: BiT HyperRule from the train split size
  config.grad_norm_clip = 1.0
  config.batch = 512  # global batch, whatever the number of hosts and devices
  config.batch_eval = 512
  config.accum_steps = 8  # micro-batches per step (memory); the result is the same
  # auto: sigmoid_xent for multi-label data (an image folder with labels.csv, a TFDS list
  # of labels), else softmax_xent | softmax_xent | sigmoid_xent
  config.loss = "auto"
  # None | 'balanced' (n / (K * examples of class c), from the train split) | one weight per
  # class: weighs an example of class c (softmax) or class c's positive term (sigmoid).
  config.class_weights = ml_collections.FieldReference(None, field_type=object)
  config.threshold = 0.5  # multi-label: a class is predicted at this sigmoid score or above
  # Polyak averaging (paper 4.1: 0.9999 for the headline runs): an exponential moving
  # average of the parameters, kept in the train state; evaluation and params.npz use it,
  # and the raw parameters are also evaluated (eval_raw/...). 0 = off.
  config.polyak_decay = 0.0
  config.label_smoothing = 0.0


def _add_fine_tuning_keys(config: ml_collections.ConfigDict) -> None:
  """Fine-tuning controls: layer decay, lr_mults, freezing, LoRA."""
  # Fine-tuning controls (vit_jax/training/param_groups.py). layer_decay: BEiT / timm layer-wise
  # decay, block i (0-based) at decay ** (num_layers - i), embeddings at decay **
  # (num_layers + 1), final norm / pre_logits / head at the full rate (1.0 = off).
  config.layer_decay = 1.0
  # ((regex, multiplier), ...) over parameter paths (parameters.txt); first match wins.
  config.lr_mults = ()
  # Regex of parameters not updated (no optimizer state); '' = none. freeze_steps: they
  # train from that step on, below total_steps (linear probe then fine-tune); None = frozen
  # for the whole run.
  config.freeze = ""
  config.freeze_steps = ml_collections.FieldReference(None, field_type=int)
  # LoRA (vit_jax/training/lora_adapters.py): rank 0 = off; frozen base, trained low-rank adapters
  # and head; params.npz holds the merged weights, adapters.npz the adapters. alpha None = rank.
  # dropout: of the adapter path's input, in training only (the paper's); in [0, 1).
  # MLP too: --config.lora.targets='(MultiHeadDotProductAttention_1/(query|key|value|out)
  # |MlpBlock_3/Dense_[01])/kernel$' (one line, no space).
  config.lora = ml_collections.ConfigDict()
  config.lora.rank = 0
  config.lora.alpha = ml_collections.FieldReference(None, field_type=float)
  config.lora.dropout = 0.0
  config.lora.targets = r"MultiHeadDotProductAttention_1/(query|key|value|out)/kernel$"


def _add_objective_keys(config: ml_collections.ConfigDict) -> None:
  """What a run optimises: classification, or masked patch prediction."""
  # Objective: classification (the labels) | mpp (masked patch prediction, paper 4.6:
  # self-supervised, labels unused; params.npz holds the backbone with a zero 1-class head).
  # See vit_jax/training/objectives/mpp.py for the exact corruption and targets.
  config.objective = "classification"
  config.mpp = ml_collections.ConfigDict()
  config.mpp.target = "mean_color"  # mean_color | downsized_4x4 | l2_patch
  config.mpp.corrupt_rate = 0.5  # share of each image's patches corrupted (BERT: 0.15)
  config.mpp.replace_mask = 0.8  # corrupted patches given the learned [mask] embedding,
  config.mpp.replace_random = 0.1  # another patch's embedding (same image),
  config.mpp.keep = 0.1  # or left unchanged
  config.mpp.color_bits = 3  # per RGB channel: 3 bits = 512 colour classes


def fewshot_settings() -> ml_collections.ConfigDict:
  """The few-shot probes' keys and defaults: config.fewshot, and what a config.evals.<name>
  of type 'fewshot' leaves out. Each dataset ('digits', a TFDS name or an image directory)
  is preprocessed at pp.crop; its whole train split is embedded each time."""
  settings = ml_collections.ConfigDict()
  settings.datasets = ()  # empty: off
  settings.train_split = "train"  # TFDS splits (e.g. eval_split='validation' for
  settings.eval_split = "test"  # imagenet2012); directories use train/ and test/
  settings.shots = FEWSHOT_SHOTS
  settings.seeds = 3  # draws of the k-shot sets, averaged
  settings.l2_reg = FEWSHOT_L2_REG  # ridge
  settings.every_steps = 1_000  # and at the last step
  settings.batch_size = 512
  return settings


def _add_devices_and_cadence_keys(config: ml_collections.ConfigDict) -> None:
  """The mesh, the few-shot probes, the cadence of logs, evaluations and checkpoints."""
  # Devices: sizes of the mesh axes (-1 = all remaining devices).
  config.mesh = ml_collections.ConfigDict({"data": -1, "fsdp": 1, "tensor": 1})

  # Few-shot linear probes of the frozen representation (paper section 4.1), logged as
  # fewshot/<dataset>_<k>shot: the evaluator named 'fewshot' (more: config.evals).
  config.fewshot = fewshot_settings()

  # Cadence (in steps) and bookkeeping.
  config.progress_every = 10
  config.eval_every = 100
  config.checkpoint_every = 1_000
  config.keep_checkpoints = 2
  config.seed = 0

def with_dataset(config: ml_collections.ConfigDict, dataset: str) -> ml_collections.ConfigDict:
  """Points `config` at a dataset: a preset, a VTAB task, any other TFDS name, or a
  directory."""
  config.dataset = dataset
  train_split, eval_split, total_steps = DATASET_PRESETS.get(
      dataset, ("train", "test", config_checks.HYPERRULE))
  if dataset.startswith(VTAB_PREFIX):
    (train_split, eval_split, total_steps), config.base_lr = VTAB_PRESET, VTAB_LR
  config.train_split, config.eval_split, config.total_steps = (
      train_split, eval_split, total_steps)
  config.evals = ml_collections.ConfigDict(EVAL_PRESETS.get(dataset, {}))
  return config


# The paper's headline fine-tunes (Table 2) average the parameters with this factor.
HEADLINE_POLYAK_DECAY = 0.9999
# Any other dataset's fine-tuning size, rounded down to a multiple of the model's stride
# (H/14: 378 px, the 27 x 27 patches that 384 px gave with 6 px dropped).
OTHER_CROP = 384
# Table 2's fine-tuning datasets (VTAB, its last column, has its own runner: vit_jax.vtab).
TABLE2_DATASETS = ("imagenet2012", "cifar10", "cifar100", "oxford_iiit_pet",
                   "oxford_flowers102")


def finetune_config(model_name: str, dataset: str = None, *, headline_crop: int = 384,
                    headline_polyak: bool = False) -> ml_collections.ConfigDict:
  """Fine-tunes `model_name` from its i21k checkpoint (reference dropout for the model).

  `dataset` is what follows the colon in `--config=configs/vit_b16.py:cifar10`; without
  it, ImageNet. Table 2's datasets (TABLE2_DATASETS) run at `headline_crop` px (512 for
  L/16 and 518 for H/14 in the paper's Table 2, 384 otherwise) with Polyak averaging
  (0.9999) where `headline_polyak` (L/16, H/14), as the paper did; any other dataset at
  OTHER_CROP px (a multiple of the patch size: 378 for H/14) without averaging.
  """
  config = finetune_defaults(dataset)
  headline = config.dataset in TABLE2_DATASETS
  config.model_name = model_name
  config.pretrained = model_name
  config.model.dropout_rate = family_registry.architecture(model_name).dropout_rate
  stride = family_registry.stride(family_registry.create_model(model_name, num_classes=1))
  config.pp.crop = headline_crop if headline else OTHER_CROP // stride * stride
  if headline_polyak and headline:
    config.polyak_decay = HEADLINE_POLYAK_DECAY
  return config


def finetune_defaults(dataset: str = None,
                      default: str = "imagenet2012") -> ml_collections.ConfigDict:
  """The shared defaults pointed at `dataset` (`default` when None): what a fine-tuning
  config starts from, here and in a family's recipes (vit_jax/families/*/recipes.py)."""
  return with_dataset(get_config(), dataset or default)


I1K_TRAIN_EXAMPLES = 1_268_355  # train[:99%] of ImageNet's 1,281,167


def imagenet_from_scratch(epochs_arg, config_file: str, batch: int) -> ml_collections.ConfigDict:
  """big_vision's ImageNet-1k from-scratch setting (configs/*_i1k.py): train[:99%] for the
  epochs `epochs_arg` names ("90ep") as steps at `batch`, minival on train[99%:] beside the
  validation set, no pretrained file."""
  epochs = re.fullmatch(r"(\d+)ep", str(epochs_arg).strip())
  if not epochs or int(epochs[1]) < 1:
    raise ValueError(f"{config_file} takes the epochs as NNNep (e.g. "
                     f"--config={config_file}:300ep), got {epochs_arg!r}")
  config = with_dataset(get_config(), "imagenet2012")
  config.evals.minival = {"dataset": "imagenet2012", "split": "train[99%:]",
                          "metric": "accuracy", "optional": False}
  config.pretrained = None
  config.total_steps = I1K_TRAIN_EXAMPLES * int(epochs[1]) // batch
  return config


def big_vision_from_scratch(config: ml_collections.ConfigDict, base_lr: float,
                            weight_decay: float, batch: int) -> None:
  """big_vision's from-scratch recipe shared by configs/augreg.py and
  configs/vit_s16_i1k.py: inception crops at 224 px with flips, Adam with a bfloat16 first
  moment, cosine decay after 10k warm-up steps, clip 1, one micro-batch. weight_decay is
  this project's (decayed by lr x wd: configs/augreg.py says how big_vision's maps to it)."""
  config.pp.preset, config.pp.crop, config.pp.flip = "inception", 224, True
  config.optimizer, config.optim_dtype = "adam", "bfloat16"
  config.adam_b1, config.adam_b2 = 0.9, 0.999
  config.base_lr, config.weight_decay = base_lr, weight_decay
  config.decay_type, config.warmup_steps, config.grad_norm_clip = "cosine", 10_000, 1.0
  config.batch, config.batch_eval, config.accum_steps = batch, 1024, 1


def demo_config(dataset: str = None) -> ml_collections.ConfigDict:
  """configs/demo.py: a 4-block ViT from scratch, on the digits or on `dataset`.

  Digits (8x8 px) are resized to 18 and cropped to 16, unflipped (digits are not mirror
  symmetric), for 1,000 steps. Any other dataset (a directory, a TFDS name) gets the same
  small model at 32 px with flips, for its preset's steps or else the HyperRule's.
  """
  config = get_config()
  config.pretrained = None
  # A 4-block ViT cut into 4x4 patches: 16 tokens at 16 px, 64 at 32 px (+ class token).
  config.model_name = "ViT-Ti_16"
  config.model.update(patch_size=4, hidden_size=64, mlp_dim=128, num_heads=4, num_layers=4)
  config.pp.preset = "bit"
  if dataset in (None, "", "digits"):
    config.dataset, config.train_split, config.eval_split = "digits", "train", "test"
    config.pp.resize, config.pp.crop, config.pp.flip = 18, 16, False
    config.total_steps = 1_000
  else:
    with_dataset(config, dataset)
    config.pp.resize, config.pp.crop, config.pp.flip = 36, 32, True

  config.optimizer = "adamw"
  config.optim_dtype = "float32"
  config.base_lr = 1e-3
  config.weight_decay = 1e-4
  config.warmup_steps = 100
  config.batch = 128
  config.batch_eval = 128
  config.accum_steps = 1

  config.progress_every = 50
  config.eval_every = 250
  config.checkpoint_every = 500
  return config
