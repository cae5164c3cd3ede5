"""A two-tower checkpoint named on a command line, opened for zero-shot use (zeroshot,
predict --classes, export, benchmark, plan): a released name is fetched first, the model
loaded and its tokenizer found; claims tells a two-tower file from a classifier's
without loading it, so a command can refuse the wrong kind in one line."""

import json
import os
import zipfile
from typing import Callable, Optional, Tuple

from vit_jax.base import storage
from vit_jax.checkpoints import formats
from vit_jax.data import text_tokens
from vit_jax.families.two_tower import hf_layout
from vit_jax.families.two_tower import npz_layout
from vit_jax.families.two_tower import npz_file
from vit_jax.families.two_tower import names as two_tower_names

DEFAULT_IMAGE_SIZE = 224  # a position table that is no square grid: the usual side


def claims(checkpoint: str) -> bool:
  """Whether a name, .npz or folder holds a LiT / SigLIP model (reads only its names)."""
  if checkpoint in two_tower_names.NAMES:
    return True
  if os.path.isdir(checkpoint):
    config = os.path.join(checkpoint, formats.CONFIG)
    if not os.path.isfile(config):
      return False
    try:
      return json.loads(storage.read_text(config)).get("model_type") in hf_layout.KINDS
    except (OSError, ValueError, AttributeError):
      return False  # the loader names what is wrong with it
  if not checkpoint.endswith(".npz") or not storage.exists(checkpoint):
    return False
  try:  # the zip's directory only: a remote file is read by ranges, not downloaded
    with storage.open_read(checkpoint) as f, zipfile.ZipFile(f) as archive:
      names = [n[:-len(".npy")] for n in archive.namelist()]
  except zipfile.BadZipFile:
    return False  # the loader names what is wrong with it
  return npz_layout.holds_both_towers(dict.fromkeys(names))


def local_checkpoint(checkpoint: str) -> str:
  """The path of a checkpoint: a released two-tower name fetched into checkpoints/ first."""
  if checkpoint in two_tower_names.NAMES and not os.path.exists(checkpoint):
    return two_tower_names.fetch(checkpoint)  # unless already there
  return checkpoint


def open_two_tower(checkpoint: str, *, tokenizer: Optional[str] = None,
                   bert_heads: Optional[int] = None
                   ) -> Tuple[object, dict, npz_file.TwoTowerInfo, Callable]:
  """(model, params, info, tokenize) of a name, .npz or Hugging Face folder; tokenizer
  defaults to the vocabulary file found beside the checkpoint."""
  model, params, info = npz_file.load_two_tower(local_checkpoint(checkpoint),
                                                bert_heads=bert_heads)
  return model, params, info, tokenizer_of(info, tokenizer)


def tokenizer_of(info: npz_file.TwoTowerInfo, path: Optional[str] = None) -> Callable:
  """How a pair reads texts: its vocabulary file (path, else the one found beside it),
  lower-cased first for SigLIP, cut to its text length."""
  return text_tokens.for_model(path or info.tokenizer, lower=info.family == "siglip",
                               max_len=info.text_length, bert=info.text_tower == "bert")


def image_size(info: npz_file.TwoTowerInfo, requested: Optional[int] = None) -> int:
  """The side images are squashed to: requested, else the model's own, else 224."""
  return requested or info.image_size or DEFAULT_IMAGE_SIZE
