"""load_two_tower / save_two_tower: LiT and SigLIP / SigLIP 2 files -> (TwoTower, params, info).

Reads LiT's and big_vision's `.npz` (vit_jax.families.two_tower.npz_layout) and Hugging Face
SigLIP / SigLIP 2 folders (config.json + model.safetensors; vit_jax.families.two_tower.hf_layout).
The geometry comes from the file; the arrays are checked against the model they build, so
a damaged file fails in one line. `info` says how to read the model: its family (LiT:
softmax over classes; SigLIP: sigmoid), the text length its tokenizer pads to, the image
size of its position table, and the tokenizer file found beside it (if any).
"""

import dataclasses
import io
import os
from typing import Any, Dict, Mapping, Optional, Tuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import traverse_util

from vit_jax.base import errors, storage
from vit_jax.checkpoints import formats, npz, npz_archive, npz_checks
from vit_jax.families.two_tower import hf_layout as two_tower_hf_layout
from vit_jax.families.two_tower import npz_layout as two_tower_npz_layout
from vit_jax.families.two_tower import text_tower
from vit_jax.families.two_tower import model as two_tower
from vit_jax.families.vit import npz_file as vit_npz_file
from vit_jax.families.vit import npz_layout

LIT_TEXT_LENGTH = 16  # models_lit's pp.max_len for every LiT model
# Tokenizer files, in the order looked for: beside an .npz (same stem), in an HF folder
# (sentencepiece models first: big_vision's rules, which the models were trained with).
TOKENIZER_SUFFIXES = (".txt", ".model")
FOLDER_TOKENIZERS = ("spiece.model", "tokenizer.model", "tokenizer.json", "vocab.txt")


@dataclasses.dataclass(frozen=True)
class TwoTowerInfo:
  """How to feed and read a loaded two-tower model."""
  family: str  # 'lit' (softmax over the classes) or 'siglip' (a sigmoid per class)
  text_length: int  # tokens per text (padding included)
  image_size: Optional[int]  # the side its position table was trained at (None: any)
  tokenizer: Optional[str]  # tokenizer file found beside the checkpoint
  text_tower: str  # 'bert' or 'transformer'
  source: str  # 'npz' or 'hf'
  hf_config: Optional[Dict[str, Any]] = None
  # The NaFlex patch budget it is read at unless asked otherwise (a SigLIP 2 NaFlex
  # folder's processor's); None: images squashed to a square.
  max_patches: Optional[int] = None


def tokenizer_beside(path: str) -> Optional[str]:
  if os.path.isdir(path):
    candidates = [os.path.join(path, name) for name in FOLDER_TOKENIZERS]
  else:
    stem = os.path.splitext(path)[0]
    candidates = [stem + suffix for suffix in TOKENIZER_SUFFIXES]
    candidates += [os.path.join(os.path.dirname(path) or ".", name)
                   for name in FOLDER_TOKENIZERS]
  return next((c for c in candidates if not storage.is_url(c) and os.path.isfile(c)), None)


def _image_size(model: two_tower.TwoTower, flat: Dict[str, np.ndarray]) -> Optional[int]:
  posemb = flat.get("img/" + npz_layout.POSEMB)
  if posemb is None:
    return None
  rows = posemb.shape[1] - ("img/cls" in flat)
  side = round(float(np.sqrt(rows)))
  return side * model.img.patch_size if side * side == rows else None


def check_params(model: two_tower.TwoTower, flat: Dict[str, np.ndarray], path: str,
                 text_length: int) -> None:
  """Every array the model needs, at its shape, and nothing else (one line otherwise)."""
  size = model.img.patch_size * 2
  shapes = jax.eval_shape(lambda: model.init(
      jax.random.PRNGKey(0), jnp.zeros((1, size, size, 3)),
      jnp.ones((1, text_length), jnp.int32)))["params"]
  expected = {k: v.shape for k, v in traverse_util.flatten_dict(shapes, sep="/").items()}
  expected.pop("img/" + npz_layout.POSEMB, None)  # any grid: resized in the forward pass
  for key, shape in sorted(expected.items()):
    if key not in flat:
      raise npz.CheckpointError(f"{path} lacks {key} (shape {shape}) that its other arrays "
                                "imply: the file is incomplete or damaged; download it again")
    if tuple(flat[key].shape) != tuple(shape):
      raise npz.CheckpointError(f"{path}: {key} has shape {flat[key].shape}, the other arrays "
                                f"imply {shape}: the file is damaged; download it again")
  extra = sorted(set(flat) - set(expected) - {"img/" + npz_layout.POSEMB})
  if extra:
    raise npz.CheckpointError(f"{path} holds arrays no LiT / SigLIP model has: "
                              f"{', '.join(extra[:3])}: pass a two-tower checkpoint")


def _read(path: str, bert_heads: Optional[int]):
  """(model, flat params, source, hf config) of a file or folder."""
  config_path = os.path.join(path, formats.CONFIG)
  if os.path.isdir(path) or path.endswith(".safetensors"):
    state, config = formats.read_folder(path)
    if config.get("model_type") not in two_tower_hf_layout.KINDS:
      raise errors.InvalidInput(
          f"{path} holds a {config.get('model_type') or 'model'} folder, not SigLIP: "
          f"two-tower folders have model_type {' or '.join(two_tower_hf_layout.KINDS)} "
          f"in {config_path}")
    return (two_tower_hf_layout.model_from_config(config),
            two_tower_hf_layout.from_hf(state, config), "hf", config)
  arrays = npz_archive.read_npz(path)
  if not two_tower_npz_layout.holds_both_towers(arrays):
    raise npz.CheckpointError(f"{path} is not a two-tower (LiT / SigLIP) file: it has "
                              f"{npz_checks.describe(arrays)}; for a ViT use load_npz")
  flat = {k: np.asarray(v, np.float32) for k, v in two_tower_npz_layout.to_ours(arrays).items()}
  model, flat = two_tower_npz_layout.build_model(flat, bert_heads)
  return model, flat, "npz", None


def load_two_tower(path: str, *, bert_heads: Optional[int] = None
                   ) -> Tuple[two_tower.TwoTower, Dict[str, Any], TwoTowerInfo]:
  """(TwoTower, params, TwoTowerInfo) of a LiT / SigLIP .npz or a Hugging Face SigLIP /
  SigLIP 2 folder. bert_heads: the head count of a BERT text tower whose width is neither
  768 nor 1024 (its 2-D kernels do not show it)."""
  path = os.fspath(path)
  if not storage.is_url(path) and not os.path.exists(path):
    raise FileNotFoundError(f"checkpoint not found: {path} (check the path, or fetch a "
                            "released one: python -m vit_jax.download --list)")
  model, flat, source, config = _read(path, bert_heads)
  info = describe(model, flat, tokenizer_beside(path), source, config,
                  two_tower_hf_layout.naflex_budget(path, config) if config else None)
  npz_checks.check_finite(flat, path)
  check_params(model, flat, path, info.text_length)
  return model, two_tower_npz_layout.unflatten(flat), info


def describe(model: two_tower.TwoTower, flat: Mapping[str, Any], tokenizer: Optional[str],
             source: str = "npz", hf_config: Optional[Dict[str, Any]] = None,
             max_patches: Optional[int] = None) -> TwoTowerInfo:
  """How to feed and read a model with these flat params: what load_two_tower tells of a
  file, and zeroshot's reading of a pair in training (zero_shot.for_params)."""
  is_bert = isinstance(model.txt, text_tower.BertTextEncoder)
  return TwoTowerInfo(model.family, LIT_TEXT_LENGTH if is_bert else model.txt.max_len,
                      _image_size(model, flat), tokenizer, "bert" if is_bert else "transformer",
                      source, hf_config, max_patches)


def save_two_tower(params: Any, path: str) -> None:
  """Writes TwoTower params as an .npz in big_vision's layout (LiT's for BERT and
  class-token image towers), which load_two_tower and big_vision read."""
  if isinstance(params, dict) and set(params) == {"params"}:
    params = params["params"]
  if not holds(params):
    raise errors.InvalidInput("save_two_tower takes TwoTower params (img, txt, t[, b])")
  flat = to_arrays(params)
  buffer = io.BytesIO()
  np.savez(buffer, **flat)
  storage.write_atomic(os.fspath(path), buffer.getvalue())


def recognises(arrays: Mapping[str, Any]) -> bool:
  return two_tower_npz_layout.holds_both_towers(arrays)


def load(arrays: Mapping[str, np.ndarray], path: str, *, num_classes: Optional[int] = None,
         **options) -> Tuple[Any, Dict[str, Any]]:
  """load_npz of a two-tower file: its image tower as a ViT with a new head (num_classes;
  0: its features); the pair itself loads with load_two_tower."""
  if num_classes is None:
    raise npz.CheckpointError(
        f"{path} is a two-tower (LiT / SigLIP) model: score classes zero-shot with --classes="
        "cat,dog,... (python -m vit_jax.predict or vit_jax.zeroshot), load it with "
        "vit_jax.load_two_tower, or read its image tower's features with num_classes=0")
  return vit_npz_file.load(arrays, path, num_classes=num_classes, **options)


def holds(params: Any) -> bool:
  return isinstance(params, Mapping) and {"img", "txt"} <= set(params)


def to_arrays(params: Any) -> Dict[str, np.ndarray]:
  """TwoTower params in big_vision's layout, as save_two_tower writes them."""
  flat = traverse_util.flatten_dict(params, sep="/")
  return two_tower_npz_layout.to_big_vision({k: np.asarray(v, np.float32) for k, v in flat.items()})


def native_image_size(module: two_tower.TwoTower, params: Any) -> Optional[int]:
  """The side the image tower's position table was trained at (None: any)."""
  return _image_size(module, traverse_util.flatten_dict(params, sep="/"))
