"""Two-tower conversions for python -m vit_jax.convert: a LiT / SigLIP .npz or a Hugging
Face SigLIP / SigLIP 2 folder -> big_vision's .npz layout (the tokenizer file copied beside
it, as LiT ships NAME.txt / NAME.model), or a SigLIP-shaped model -> a SiglipModel folder
(config.json + model.safetensors; the tokenizer file copied in)."""

import json
import os
import shutil
from typing import Dict, List, Optional

import numpy as np

from flax import traverse_util

from vit_jax.base import errors, no_clobber, storage
from vit_jax.checkpoints import format_conversion
from vit_jax.families.two_tower import hf_layout
from vit_jax.families.two_tower import npz_file

KIND = format_conversion.KIND
TARGETS = ("npz", "hf")
default_target = "hf"  # a DST folder: a SiglipModel folder


def _tokenizer_name(tokenizer: str, to: str, dst: str) -> str:
  """Where the tokenizer goes: beside an .npz with its stem (LiT's NAME.txt / NAME.model),
  in a folder under the name transformers looks for (spiece.model, tokenizer.json)."""
  suffix = os.path.splitext(tokenizer)[1]
  if to == "npz":
    return os.path.splitext(dst)[0] + (suffix if suffix in (".txt", ".model") else ".json")
  return os.path.join(dst, {".model": "spiece.model", ".txt": "vocab.txt"}.get(
      suffix, os.path.basename(tokenizer)))


def convert(src: str, arrays: Dict[str, np.ndarray], dst: str, to: str, *,
            model_name: Optional[str], image_size: Optional[int], patch_size: Optional[int],
            pre_logits: Optional[str], overwrite: bool) -> List[str]:
  """src -> dst in `to` ('npz' or 'hf'); the lines saying what was read and written. The
  pair is read again as load_two_tower reads it (its tokenizer, its text length)."""
  del arrays
  if to not in TARGETS:
    raise errors.InvalidInput(f"two-tower models convert to {' or '.join(TARGETS)}, not {to}")
  given = [f"--{flag}" for flag, value in (("model", model_name), ("image_size", image_size),
                                           ("patch_size", patch_size),
                                           ("pre_logits", pre_logits)) if value is not None]
  if given:
    raise format_conversion.ConversionError(
        f"{src} is a two-tower (LiT / SigLIP) model, converted as it is: leave out "
        f"{', '.join(given)}")
  model, params, info = npz_file.load_two_tower(src)
  lines = [f"read {src}: a {info.family} two-tower model ({info.source})"]
  if to == "npz":
    no_clobber.claim_output_file(dst, KIND, overwrite)
    npz_file.save_two_tower(params, dst)
    lines.append(f"wrote {dst} (big_vision's layout); load it with "
                 f"vit_jax.load_two_tower({dst!r})")
  else:
    config = hf_layout.config_for(model, info.image_size or 224)
    no_clobber.check_output_dir(dst, KIND, overwrite)
    state = hf_layout.to_hf(traverse_util.flatten_dict(params, sep="/"), config)
    no_clobber.claim_output_dir(dst, KIND, overwrite)  # marked: a rerun may replace it
    format_conversion.write_safetensors(state, os.path.join(dst, "model.safetensors"))
    storage.write_atomic(os.path.join(dst, "config.json"), json.dumps(config, indent=1))
    if info.tokenizer:
      shutil.copyfile(info.tokenizer, _tokenizer_name(info.tokenizer, to, dst))
    lines.append(f"wrote {dst} (transformers SiglipModel folder)")
  if info.tokenizer and to == "npz":
    copy = _tokenizer_name(info.tokenizer, to, dst)
    shutil.copyfile(info.tokenizer, copy)
    lines.append(f"copied the tokenizer {info.tokenizer} to {copy}")
  return lines
