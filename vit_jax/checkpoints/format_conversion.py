"""Checkpoint conversion between our .npz, timm and Hugging Face transformers (numpy and
safetensors only: no PyTorch needed, except to read `.pth`/`.bin` files): what every
family's converter shares (the targets, DST's checks, the writers of timm's files), the
family's own converter doing the rest (vit_jax.models.family_contract.Converter).

Sources: anything load_npz reads (released and big_vision .npz files, a run's params.npz,
timm and HF `.safetensors`/`.pth`/`.bin` files and model folders). Targets:
  * npz   the released layout (load_npz, --config.pretrained, the original code);
  * timm  a folder that `timm.create_model('local-dir:DST', pretrained=True)` loads
          (config.json with the architecture and the create_model arguments that make timm
          compute our function, model.safetensors), or, for DST ending in .safetensors,
          that file alone (its metadata holds the same config);
  * hf    a folder for transformers' ViTForImageClassification (or ViTModel, see
          pre_logits): config.json, model.safetensors, preprocessor_config.json.
pre_logits (the representation layer, Dense + tanh before the head of the ImageNet-21k
files) has no place in timm's VisionTransformer nor in ViTForImageClassification: such a
file is refused unless pre_logits is 'drop' (convert the encoder as a feature extractor
without that layer and the head that reads it, as timm does with those files) or, for hf,
'pooler' (ViTModel, whose pooler is exactly that layer: its pooler_output is our
representation; the head is not written).
Other families convert to what their converter writes (see its docstring). A sincos2d
model becomes a learned table of the same values (neither library has the fixed
embedding); timm and HF outputs are float32.
"""

import json
import os
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from vit_jax.base import errors, no_clobber, storage
from vit_jax.checkpoints import formats, npz
from vit_jax.models import family_registry

TARGETS = ("npz", "timm", "hf")
PRE_LOGITS = ("drop", "pooler")
WEIGHTS = "model.safetensors"
KIND = "convert"  # the writer's name in the no-clobber markers (vit_jax.base.no_clobber)
NORMALIZE = dict(mean=[0.5, 0.5, 0.5], std=[0.5, 0.5, 0.5])  # (x - 127.5) / 127.5 on [0, 1]


class ConversionError(errors.InvalidInput):
  """A conversion that would not be faithful, or a usage mistake; one line."""


FILE_SUFFIXES = (".npz", formats.SAFETENSORS, ".pth", ".pt", ".bin")


def target_of(dst: str, to: Optional[str], default: Optional[str] = None) -> str:
  """The target format: `to`, or DST's suffix (any case), or the family's default for a
  folder; DST checked to fit it."""
  name = dst.lower()
  if to is None:
    if name.endswith(".npz"):
      to = "npz"
    elif name.endswith(formats.SAFETENSORS):
      to = "timm"
    elif default is not None:
      to = default
    else:
      raise ConversionError(f"cannot tell the target format from {dst}: pass --to="
                            f"{'|'.join(TARGETS)} (npz from a .npz name, timm from "
                            ".safetensors)")
  if to not in TARGETS:
    raise ConversionError(f"unknown target {to!r}: choose one of {', '.join(TARGETS)}")
  is_file = writes_one_file(dst, to)
  if is_file and os.path.isdir(dst):
    raise ConversionError(f"{dst} is a directory and --to={to} writes one file: name the file")
  if not is_file and (os.path.isfile(dst) or name.endswith(FILE_SUFFIXES)):
    raise ConversionError(
        f"--to={to} writes a model folder, and {dst} is "
        f"{'a file' if os.path.isfile(dst) else 'a file name'}: name a folder"
        + (" (or a .safetensors file for timm's weights alone)" if to == "timm" else ""))
  return to


def writes_one_file(dst: str, to: str) -> bool:
  """Whether target `to` at `dst` is one file (npz, timm's .safetensors) or a folder."""
  return to == "npz" or (to == "timm" and dst.lower().endswith(formats.SAFETENSORS))


def write_json(value: Any, path: str) -> None:
  storage.write_atomic(path, json.dumps(value, indent=2, sort_keys=True) + "\n")


def write_safetensors(state: Dict[str, np.ndarray], path: str,
                      metadata: Optional[Dict[str, str]] = None) -> None:
  from safetensors.numpy import save  # pylint: disable=import-outside-toplevel
  arrays = {k: np.ascontiguousarray(v, np.float32) for k, v in sorted(state.items())}
  storage.write_atomic(path, save(arrays, metadata={"format": "pt", **(metadata or {})}))


def call_text(function: str, *args, **kwargs) -> str:
  parts = [repr(a) for a in args] + [f"{k}={v!r}" for k, v in kwargs.items()]
  return f"{function}({', '.join(parts)})"


def write_timm_files(state: Dict[str, np.ndarray], name: str, args: Dict[str, Any],
                     image_size: Tuple[int, int], num_features: int, dst: str) -> List[str]:
  """timm's weights and config (a folder for local-dir:, or one .safetensors file with the
  config in its metadata); the lines that say how to load them."""
  # timm keeps a pretrained head only if the pretrained config has the model's class count.
  pretrained_cfg = {"num_classes": args["num_classes"], "input_size": [3, *image_size],
                    "interpolation": "bilinear", "crop_pct": 1.0, **NORMALIZE}
  config = {"architecture": name, "model_args": args}
  if dst.lower().endswith(formats.SAFETENSORS):
    write_safetensors(state, dst, {formats.TIMM_METADATA: json.dumps(config)})
    loads = call_text("timm.create_model", name, pretrained=True,
                      pretrained_cfg_overlay=dict(file=dst, **pretrained_cfg), **args)
    return [f"wrote timm {name} weights to {dst}", f"load with: {loads}"]
  write_safetensors(state, os.path.join(dst, WEIGHTS))
  write_json({**config, "num_classes": args["num_classes"], "num_features": num_features,
              "global_pool": args.get("global_pool", "avg"), "pretrained_cfg": {
                  **pretrained_cfg, "crop_mode": "center", "fixed_input_size": True,
                  "classifier": "head"}},
             os.path.join(dst, formats.CONFIG))
  return [f"wrote timm {name} to {dst}/ ({WEIGHTS}, {formats.CONFIG})",
          f"load with: timm.create_model('local-dir:{dst}', pretrained=True)",
          f"which is: {call_text('timm.create_model', name, **args)} + these weights"]


def convert(src: str, dst: str, *, to: Optional[str] = None, model_name: Optional[str] = None,
            pre_logits: Optional[str] = None, image_size: Optional[int] = None,
            patch_size: Optional[int] = None, overwrite: bool = False) -> List[str]:
  """Converts checkpoint src to dst (see the module docstring) through its family's
  converter; returns the lines that say what was read and written and how to load it.
  image_size: the input side of the written model (default: the source's), what depends
  on it resized as fine-tuning resizes it. patch_size: the written model's (default: the
  source's). dst must be new, or an earlier conversion's output, unless overwrite (see
  vit_jax.base.no_clobber: a run's workdir or someone's model folder is never clobbered).

  Raises ConversionError, npz.CheckpointError or no_clobber.OutputExistsError (one line) for
  what cannot be converted faithfully, read at all, or written without clobbering.
  """
  src, dst = os.fspath(src), os.fspath(dst)
  arrays = npz.read_arrays(src)
  family = family_registry.for_arrays(arrays)
  converter = family.part("converter", src)
  to = target_of(dst, to, converter.default_target)
  with no_clobber.sole_writer(dst, KIND):  # a concurrent conversion into dst fails here
    if writes_one_file(dst, to):
      no_clobber.claim_output_file(dst, KIND, overwrite)
    else:
      no_clobber.check_output_dir(dst, KIND, overwrite)
    return converter.convert(src, arrays, dst, to, model_name=model_name,
                             image_size=image_size, patch_size=patch_size,
                             pre_logits=pre_logits, overwrite=overwrite)
