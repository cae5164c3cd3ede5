"""timm and Hugging Face checkpoints as released-layout arrays, so that load_npz (and so
`--config.pretrained`, predict, fewshot, ...) reads them like a released .npz.

Accepted (local paths):
  * a `.safetensors` file: a timm VisionTransformer or an HF ViT state dict (bfloat16 and
    float16 arrays are read as float32);
  * a `.pth`, `.pt` or `.bin` file (needs PyTorch; read with weights_only=True, never
    unpickling arbitrary objects);
  * a `flax_model.msgpack` file: an HF ViT saved by transformers' Flax classes (what four
    of Google's Hub repositories hold instead of safetensors), read without PyTorch;
  * a folder with `config.json` and `model.safetensors` (or sharded `*.index.json`, or
    `flax_model.msgpack`, or `pytorch_model.bin`): an HF ViT folder (`model_type: vit`) or
    a timm hub folder (`architecture`, `model_args`), as `python -m vit_jax.convert`
    writes them; or an HF SigLIP / SigLIP 2 folder (`model_type: siglip | siglip2`), read
    as its two towers' arrays (`img/...`: what a classifier fine-tuned from it loads).
The config says what the weights cannot (the head count, timm's pooling and activation);
without one, the head count follows the width (768 -> 12, 1280 -> 16, else width / 64).
"""

import json
import os
import pickle
from typing import Any, Dict, Tuple

import ml_dtypes
import numpy as np

from vit_jax.base import errors, storage, workdir_files
from vit_jax.checkpoints import npz_checks, transfer
from vit_jax.models import family_registry


Flat = Dict[str, np.ndarray]
SAFETENSORS = ".safetensors"
TORCH_SUFFIXES = (".pth", ".pt", ".bin")
FLAX_MSGPACK = "flax_model.msgpack"
CONFIG = "config.json"
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", FLAX_MSGPACK,
                "pytorch_model.bin", "pytorch_model.bin.index.json", "model.pth",
                "pytorch_model.pth")
# safetensors metadata written by vit_jax.convert for a bare timm file: what a timm
# config.json would say (architecture and model_args), as JSON.
TIMM_METADATA = "vit_jax.timm_config"


class FormatError(errors.InvalidInput):
  """A timm/HF file that cannot be read as a ViT; the message names the problem."""


def is_foreign(path: str) -> bool:
  """A local path this module reads (a folder only with a config.json)."""
  path = os.fspath(path)
  if "://" in path:
    return False
  if os.path.isdir(path):
    return os.path.isfile(os.path.join(path, CONFIG))
  return path.endswith((SAFETENSORS, ".msgpack") + TORCH_SUFFIXES)


def _as_float32(value: np.ndarray) -> np.ndarray:
  if value.dtype == ml_dtypes.bfloat16 or value.dtype == np.float16:
    return value.astype(np.float32)
  return value


def _read_safetensors(path: str) -> Tuple[Flat, Dict[str, str]]:
  from safetensors import SafetensorError, safe_open  # pylint: disable=import-outside-toplevel
  try:
    with safe_open(path, framework="numpy") as f:
      return {key: _as_float32(f.get_tensor(key)) for key in f.keys()}, f.metadata() or {}
  except (SafetensorError, OSError, ValueError) as e:
    raise FormatError(f"is not a readable .safetensors file ({e}); the file is truncated or "
                      "corrupt: download or save it again") from None


def _unwrap(state: Any) -> Dict[str, Any]:
  """The state dict inside a training checkpoint ({'state_dict': ...}, {'model': ...}),
  without DistributedDataParallel's `module.` prefix."""
  for key in ("state_dict", "model", "model_state_dict", "module"):
    if isinstance(state, dict) and isinstance(state.get(key), dict):
      state = state[key]
  if not isinstance(state, dict):
    raise FormatError(f"holds a {type(state).__name__}, not a state dict")
  if state and all(key.startswith("module.") for key in state):
    state = {key[len("module."):]: value for key, value in state.items()}
  return state


def _read_torch(path: str) -> Flat:
  try:
    import torch  # pylint: disable=import-outside-toplevel
  except ImportError:
    raise FormatError("is a PyTorch file, and reading one needs PyTorch (pip install torch); "
                      "or convert it to .safetensors where PyTorch is installed") from None
  try:
    state = _unwrap(torch.load(path, map_location="cpu", weights_only=True))
  except FormatError:
    raise
  except pickle.UnpicklingError:  # torch's text goes on to advise weights_only=False: never
    raise FormatError(
        "holds pickled Python objects besides tensors, which vit_jax never unpickles (that "
        "can run arbitrary code); only where you trust its source, load it in PyTorch and save "
        "the tensors with safetensors.torch.save_file(state_dict, 'model.safetensors'), then "
        "pass that file") from None
  except Exception as e:  # pylint: disable=broad-except  # torch's unpickler raises many kinds
    raise FormatError(f"is not a readable PyTorch state dict ({type(e).__name__}: "
                      f"{str(e).splitlines()[0] if str(e) else ''})") from None
  return {key: value.detach().float().numpy() for key, value in state.items()
          if hasattr(value, "detach") and value.is_floating_point()}


def _flax_to_torch_name(path: Tuple[str, ...], value: np.ndarray) -> Tuple[str, np.ndarray]:
  """One transformers Flax parameter as the PyTorch state-dict entry it was converted from
  (the inverse of transformers' PyTorch -> Flax rules): Dense kernel (in, out) -> weight
  (out, in), Conv kernel HWIO -> OIHW, LayerNorm scale -> weight."""
  *parents, leaf = path
  if leaf == "kernel":
    value = value.transpose(3, 2, 0, 1) if value.ndim == 4 else value.T
  name = "weight" if leaf in ("kernel", "scale") else leaf
  return ".".join([*parents, name]), np.ascontiguousarray(value)


def _read_flax_msgpack(path: str) -> Flat:
  """transformers' flax_model.msgpack (flax.serialization's nested dict of the module's
  params) as the PyTorch-named state dict that the safetensors route reads, values exact."""
  from flax import serialization, traverse_util  # pylint: disable=import-outside-toplevel
  try:
    tree = serialization.msgpack_restore(storage.read_bytes(path))
  except (OSError, ValueError, TypeError) as e:
    raise FormatError(f"is not a readable flax_model.msgpack file ({transfer.one_line(e)}); "
                      "the file is truncated or corrupt: download it again") from None
  if not isinstance(tree, dict):
    raise FormatError(f"holds a {type(tree).__name__}, not Flax parameters")
  tree = tree.get("params", tree)  # saved with or without flax's 'params' collection
  arrays = {tuple(map(str, key)): _as_float32(np.asarray(value))
            for key, value in traverse_util.flatten_dict(tree).items()}
  return dict(_flax_to_torch_name(key, value) for key, value in arrays.items()
              if value.dtype.kind == "f")


def _read_weights(path: str) -> Tuple[Flat, Dict[str, str]]:
  if path.endswith(".index.json"):  # sharded: {"weight_map": {key: shard file}}
    shards = sorted(set(json.loads(storage.read_text(path)).get("weight_map", {}).values()))
    state, metadata = {}, {}
    for shard in shards:
      part, metadata = _read_weights(os.path.join(os.path.dirname(path), shard))
      state.update(part)
    return state, metadata
  if path.endswith(SAFETENSORS):
    return _read_safetensors(path)
  if path.endswith(".msgpack"):
    return _read_flax_msgpack(path), {}
  return _read_torch(path), {}


def read_config(path: str) -> Dict[str, Any]:
  """A timm / Hugging Face config.json as a dict, or one FormatError line."""
  try:
    config = json.loads(storage.read_text(path))
  except (OSError, ValueError) as e:
    raise FormatError(f"{path} is not a readable JSON config ({e})") from None
  if not isinstance(config, dict):
    raise FormatError(f"{path} holds no JSON object")
  return config


def _is_model_config(config: Dict[str, Any]) -> bool:
  return "architecture" in config or "model_type" in config


def _locate(path: str) -> Tuple[str, Dict[str, Any]]:
  """(weights file, config) of a folder or a file (with a model config beside it, if any)."""
  if os.path.isdir(path):
    config = read_config(os.path.join(path, CONFIG))
    for name in WEIGHT_FILES:
      if os.path.isfile(os.path.join(path, name)):
        return os.path.join(path, name), config
    params = os.path.join(path, workdir_files.PARAMS)
    if os.path.isfile(params):  # its config.json is the run's, not a model's
      raise FormatError(f"is a vit_jax run's workdir, not a model folder: pass {params}")
    raise FormatError(f"has {CONFIG} but none of the weight files {', '.join(WEIGHT_FILES)}")
  beside = os.path.join(os.path.dirname(os.path.abspath(path)), CONFIG)
  config = read_config(beside) if os.path.isfile(beside) else {}
  return path, config if _is_model_config(config) else {}


def read_folder(path: str) -> Tuple[Flat, Dict[str, Any]]:
  """(state dict as float32 numpy arrays, config.json) of a Hugging Face model folder (or a
  weights file with a config.json beside it), whatever model it holds; a damaged weights
  file is one FormatError line naming it."""
  weights, config = _locate(path)
  try:
    return _read_weights(weights)[0], config
  except FormatError as e:  # its callers read it as is: name the file that is damaged
    raise FormatError(f"{weights} {e}") from None


def read_foreign(path: str, *, notes: bool = True) -> Flat:
  """Released-layout float32 arrays of a timm or HF checkpoint (see the module docstring).

  Raises FormatError (one line, without the path) for anything else. notes=False leaves
  out the warnings about the activation and LayerNorm epsilon (the caller knows better:
  vit_jax.checkpoints.hub for the bucket's own weights)."""
  path = os.fspath(path)
  weights, config = _locate(path)
  state, metadata = _read_weights(weights)
  if TIMM_METADATA in metadata and not config:
    config = json.loads(metadata[TIMM_METADATA])
  found = family_registry.for_layout(state, config)
  if found is None:
    raise FormatError("is neither a timm VisionTransformer nor a Hugging Face ViT state dict: "
                      f"it holds {npz_checks.describe(state)}")
  family, layout = found
  try:
    return family.layouts[layout].to_released(state, config, notes=notes)
  except errors.InvalidInput as e:
    raise FormatError(str(e)) from None

