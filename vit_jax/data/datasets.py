"""What both input pipelines (tf.data: tf_pipeline.py, Grain: grain_pipeline.py) share,
without TensorFlow: the dataset's description, its base class, and the checks of the
loader, data and preprocessing keys. Each loader's Dataset answers train_batches and
eval_batches (tf_pipeline.Dataset's say what they give); loaders.py opens the one
config.loader names."""

import dataclasses
import math
from typing import List, Optional

import jax
import numpy as np

from vit_jax.base import errors
from vit_jax.data import captions, fingerprint, presets, worker_limit
from vit_jax.data.splits import IndexedSplit
from vit_jax.data.text_tokens import TokenizerSpec

LOADERS = ("tf", "grain")


@dataclasses.dataclass
class DatasetInfo:
  num_classes: int
  num_train: int
  num_eval: int
  class_names: List[str]
  multi_label: bool = False  # labels are multi-hot [K]: several classes, or none
  # Training examples per class (positives, for multi-label data); None when the train
  # split is streamed (counting would read it all) or absent.
  train_class_counts: Optional[List[int]] = None


def class_counts(split, num_classes: int) -> Optional[List[int]]:
  """Examples per class of an in-memory split (None for a streamed one, or captions
  without classes)."""
  if not isinstance(split, IndexedSplit) or not num_classes:
    return None
  if split.multi_label:
    return np.asarray(split.labels, np.int64).sum(axis=0).tolist()
  return np.bincount(split.labels, minlength=num_classes).tolist()


def rows_per_process(batch_size: int, process_count: int) -> int:
  if batch_size % process_count:
    raise errors.InvalidInput(
        f"batch size {batch_size} does not split over {process_count} "
        "processes; pick a multiple of the process count")
  return batch_size // process_count


def text_tokenizer(config) -> Optional[TokenizerSpec]:
  """The captions' tokenizer config.text names (tokenizer, length, lower), or None: none
  named yet (the run then sets Dataset.text_tokenizer itself)."""
  text = config.get("text")
  if text is None or text.get("tokenizer") is None:
    return None
  return TokenizerSpec(text.tokenizer, text.length, text.get("lower", False))


class Dataset:
  """A train and an eval split with the preprocessing of config.pp (train is None for
  an evaluation-only set); subclasses read them. Splits with captions add 'text' to
  their batches, tokenised by text_tokenizer (a text_tokens.TokenizerSpec), which the
  run may set before asking for batches."""

  text_tokenizer: Optional[TokenizerSpec] = None

  def __init__(self, train, eval_split, class_names: List[str], pp,
               patch_size: Optional[int] = None):
    if getattr(train, "captions", None) is not None and pp.mixup_alpha:
      raise errors.InvalidInput(f"config.pp.mixup_alpha={pp.mixup_alpha} mixes images but "
                                "not their captions: set it to 0 for image-text data")
    self.train = train
    self.eval = eval_split
    self.pp = pp
    self.naflex_patch = naflex_patch(pp, patch_size)
    self.info = DatasetInfo(len(class_names), len(train) if train is not None else 0,
                            len(eval_split), class_names, eval_split.multi_label,
                            class_counts(train, len(class_names)))

  def text_ids(self, split, seed: Optional[int] = None) -> Optional[captions.TextIds]:
    """The token ids of `split`'s captions (captions.TextIds: seed given, the caption each
    train position draws; else each example's first), or None: a split without captions."""
    if getattr(split, "captions", None) is None:
      return None
    if self.text_tokenizer is None:
      raise errors.InvalidInput(
          f"{split.source or 'the dataset'} has captions but no tokenizer: set "
          "config.text.tokenizer to the text tower's vocabulary (NAME.txt, NAME.model or "
          "tokenizer.json)")
    return captions.TextIds(split.captions, self.text_tokenizer, seed)

  def fingerprints(self) -> dict:
    """{'train': ..., 'eval': ...}: what each split holds (vit_jax.data.fingerprint), and
    the NaFlex patch budget it is read at."""
    budget = self.pp.get("max_patches")
    return {name: fingerprint.with_budget(fingerprint.of_split(split), budget)
            for name, split in (("train", self.train), ("eval", self.eval)) if split is not None}


def naflex_patch(pp, patch_size: Optional[int]) -> Optional[int]:
  """The patch side NaFlex cuts images into (config.pp.max_patches set: the model's patch
  size, which the caller passes, e.g. model_config.patch_size(config)), else None: square crops."""
  if pp.get("max_patches") is None:
    return None
  if not patch_size:
    raise ValueError("config.pp.max_patches is set: open the dataset with the model's "
                     "patch_size (e.g. loaders.open_dataset(config, zoo.patch_size(config)))")
  return patch_size


def _check_max_patches(pp) -> None:
  """config.pp.max_patches: None, or a patch budget >= 1 without MixUp (NaFlex rows of
  different grids cannot be mixed pixel for pixel)."""
  budget = pp.get("max_patches")
  if budget is None:
    return
  if not isinstance(budget, int) or isinstance(budget, bool) or budget < 1:
    raise errors.InvalidInput(f"config.pp.max_patches={budget!r} must be a patch budget >= 1 "
                              "(e.g. 256), 0 (square crops) or None (config.pretrained's "
                              "budget, else square crops)")
  if pp.mixup_alpha:
    raise errors.InvalidInput(f"config.pp.mixup_alpha={pp.mixup_alpha} with NaFlex "
                              f"(config.pp.max_patches={budget}): images of other grids "
                              "cannot be mixed; set mixup_alpha=0")


def check_pp(pp) -> None:
  """Preprocessing settings that cannot work fail here, before any data is read."""
  if pp.preset not in presets.PRESETS:
    raise errors.InvalidInput(
        f"unknown config.pp.preset={pp.preset!r}; choose one of "
        f"{', '.join(presets.PRESETS)}")
  if pp.resize is not None and (not isinstance(pp.resize, int) or isinstance(pp.resize, bool)
                                or pp.resize < 1):
    raise errors.InvalidInput(f"config.pp.resize={pp.resize!r} must be a side in pixels "
                              "(e.g. 448) or None (the HyperRule's for pp.crop)")
  if pp.preset != "bit" and pp.resize is not None:
    raise errors.InvalidInput(
        f"config.pp.resize={pp.resize} applies to the bit preset only: pass "
        f"--config.pp.resize=None for pp.preset={pp.preset!r}")
  if pp.preset == "bit":
    presets.bit_resize(pp.crop, pp.resize)
  if not 0 <= pp.mixup_alpha < math.inf:  # nan and inf mixed the batch into NaN
    raise errors.InvalidInput(f"config.pp.mixup_alpha={pp.mixup_alpha} must be >= 0 and "
                              "finite (0 = off)")
  check_randaug(pp.get("randaug"))
  _check_max_patches(pp)


# (num_layers, magnitude) at most: the reference's magnitudes go to 30 (the ops
# extrapolate past 10), and more layers than ops only grind an image to grey.
MAX_RANDAUG = (10, 30)


def check_randaug(randaug) -> None:
  """config.pp.randaug: None (off) or (num_layers, magnitude), two ints >= 0, within
  MAX_RANDAUG."""
  if randaug is None:
    return
  if (not isinstance(randaug, (tuple, list)) or len(randaug) != 2
      or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in randaug)):
    raise errors.InvalidInput(
        f"config.pp.randaug={randaug!r} must be None (off) or a pair of ints "
        "(num_layers, magnitude), both >= 0, e.g. (2, 15)")
  layers, magnitude = randaug
  if magnitude > MAX_RANDAUG[1] or layers > MAX_RANDAUG[0]:
    raise errors.InvalidInput(
        f"config.pp.randaug={tuple(randaug)!r} is past RandAugment's range (up to "
        f"{MAX_RANDAUG[0]} layers, magnitude up to {MAX_RANDAUG[1]}; AugReg used (2, 10) to "
        "(2, 20), and magnitude 100 turned 30% of images plain grey): e.g. (2, 15)")


def check(config, stride: int) -> None:
  """Before any data is read, workdir locked or checkpoint fetched: the loader, the
  preprocessing keys
  (check_pp), a crop the model's stride divides (pp.crop=0 trained, then blamed the images;
  18 px on 4 px patches dropped pixels unsaid), and MixUp's pairs of rows in each process's
  batch."""
  if config.get("loader", "tf") not in LOADERS:
    raise errors.InvalidInput(f"unknown config.loader={config.loader!r}; choose one of "
                              f"{', '.join(map(repr, LOADERS))}")
  worker_limit.check(config)
  check_pp(config.pp)
  crop = config.pp.crop
  if not isinstance(crop, int) or crop < stride or crop % stride:
    lower = crop // stride * stride if isinstance(crop, int) else 0
    choices = [lower, lower + stride] if lower else [stride]
    raise errors.InvalidInput(
        f"config.pp.crop={crop!r} must be a multiple of the model's {stride} px patches: use "
        f"{' or '.join(map(str, choices))}")
  rows = config.batch // jax.process_count()
  if config.pp.mixup_alpha and rows % 2:
    raise errors.InvalidInput(
        f"config.pp.mixup_alpha={config.pp.mixup_alpha} mixes pairs of rows: the batch per "
        f"process, {rows} (config.batch={config.batch} / {jax.process_count()} processes), "
        "must be even")
