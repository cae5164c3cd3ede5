"""Hugging Face SigLIP / SigLIP 2 folders (`SiglipModel`, `Siglip2Model`: config.json +
model.safetensors) <-> this project's TwoTower parameters, both ways, array for array.

The HF names map one to one onto big_vision's, which TwoTower keeps: Linear weights are
transposed kernels, attention projections split into heads, the MAP head's fused
`in_proj` is big_vision's query/key/value, `logit_scale` is `t` and `logit_bias` is `b`.
SigLIP 2's patch embedding is a Linear on patches flattened (row, column, channel): the
same numbers as big_vision's `embedding` convolution kernel, reshaped. Siglip2Model runs
such a model on its native patch grid; other grids resize its position embedding with an
antialiased bilinear filter that vit_jax does not implement (a one-line refusal).
"""

import json
import os
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np

from vit_jax.base import errors, storage
from vit_jax.families.two_tower import text_tower
from vit_jax.families.two_tower import model as two_tower
from vit_jax.families.vit import model as vit

Flat = Dict[str, np.ndarray]
KINDS = ("siglip", "siglip2")  # config.json model_type
NAFLEX_KIND = "siglip2"  # Siglip2Model: NaFlex, read at its processor's patch budget
PROCESSOR_CONFIG = "preprocessor_config.json"
DEFAULT_BUDGET = 256  # transformers' Siglip2ImageProcessor max_num_patches


def naflex_budget(path: str, config: Dict[str, Any]) -> Optional[int]:
  """The patch budget a Siglip2Model (NaFlex) folder is read at, as transformers reads it:
  its processor's max_num_patches (preprocessor_config.json), else 256; None for a
  fixed-resolution SiglipModel. path: the folder or its weights file."""
  if config.get("model_type") != NAFLEX_KIND:
    return None
  folder = path if os.path.isdir(path) else os.path.dirname(os.path.abspath(path))
  file = os.path.join(folder, PROCESSOR_CONFIG)
  if not os.path.isfile(file):
    return DEFAULT_BUDGET
  try:
    budget = json.loads(storage.read_text(file)).get("max_num_patches", DEFAULT_BUDGET)
  except (OSError, ValueError, AttributeError) as e:
    raise errors.InvalidInput(f"{file} is no readable JSON object ({e}): fix it, or remove "
                              f"it to read the model at {DEFAULT_BUDGET} patches") from None
  if not isinstance(budget, int) or isinstance(budget, bool) or budget < 1:
    raise errors.InvalidInput(f"{file}: max_num_patches={budget!r} must be a whole number "
                              ">= 1 (the NaFlex patch budget)")
  return budget


def _transforms(heads: int) -> Dict[str, Tuple[Callable, Callable]]:
  """kind -> (HF array -> ours, ours -> HF array)."""
  return {
      "raw": (lambda a: a, lambda a: a),
      "dense": (lambda w: w.T, lambda k: k.T),
      "qkv": (lambda w: w.T.reshape(w.shape[1], heads, -1), lambda k: k.reshape(k.shape[0], -1).T),
      "qkv_bias": (lambda b: b.reshape(heads, -1), lambda b: b.reshape(-1)),
      "out": (lambda w: w.T.reshape(heads, -1, w.shape[0]), lambda k: k.reshape(-1, k.shape[-1]).T),
      "conv": (lambda w: w.transpose(2, 3, 1, 0), lambda k: k.transpose(3, 2, 0, 1)),
      "posemb": (lambda w: w[None], lambda p: p[0]),
  }


def _block(ours: str, hf: str, attention: str) -> List[Tuple[str, str, str]]:
  """(our key, HF key, kind) for one encoder block or MAP head's attention and MLP."""
  rows = []
  for ours_name, hf_name in (("query", "q_proj"), ("key", "k_proj"), ("value", "v_proj")):
    rows += [(f"{ours}/{attention}/{ours_name}/kernel", f"{hf}.{hf_name}.weight", "qkv"),
             (f"{ours}/{attention}/{ours_name}/bias", f"{hf}.{hf_name}.bias", "qkv_bias")]
  rows += [(f"{ours}/{attention}/out/kernel", f"{hf}.out_proj.weight", "out"),
           (f"{ours}/{attention}/out/bias", f"{hf}.out_proj.bias", "raw")]
  return rows


def _norm(ours: str, hf: str) -> List[Tuple[str, str, str]]:
  return [(f"{ours}/scale", f"{hf}.weight", "raw"), (f"{ours}/bias", f"{hf}.bias", "raw")]


def _dense(ours: str, hf: str) -> List[Tuple[str, str, str]]:
  return [(f"{ours}/kernel", f"{hf}.weight", "dense"), (f"{ours}/bias", f"{hf}.bias", "raw")]


def _encoder(ours: str, hf: str, depth: int) -> List[Tuple[str, str, str]]:
  rows = []
  for i in range(depth):
    o, h = f"{ours}/encoderblock_{i}", f"{hf}.layers.{i}"
    rows += _norm(f"{o}/LayerNorm_0", f"{h}.layer_norm1")
    rows += [(o + k[len(o):], h + ".self_attn" + v[len(h):], kind)
             for k, v, kind in _block(o, h, "MultiHeadDotProductAttention_1")]
    rows += _norm(f"{o}/LayerNorm_2", f"{h}.layer_norm2")
    rows += _dense(f"{o}/MlpBlock_3/Dense_0", f"{h}.mlp.fc1")
    rows += _dense(f"{o}/MlpBlock_3/Dense_1", f"{h}.mlp.fc2")
  return rows


def name_table(config: Dict[str, Any]) -> List[Tuple[str, str, str]]:
  """(our flat key, HF key, transform kind) for every array of a SigLIP / SigLIP 2 model."""
  vision, text = config["vision_config"], config["text_config"]
  v, t = "vision_model", "text_model"
  patch = "raw" if config["model_type"] == "siglip2" else "conv"  # siglip2: reshaped below
  rows = [("t", "logit_scale", "raw"), ("b", "logit_bias", "raw"),
          ("img/embedding/kernel", f"{v}.embeddings.patch_embedding.weight", patch),
          ("img/embedding/bias", f"{v}.embeddings.patch_embedding.bias", "raw"),
          ("img/Transformer/posembed_input/pos_embedding",
           f"{v}.embeddings.position_embedding.weight", "posemb")]
  rows += _encoder("img/Transformer", f"{v}.encoder", vision["num_hidden_layers"])
  rows += _norm("img/Transformer/encoder_norm", f"{v}.post_layernorm")
  if vision.get("vision_use_head", True):  # model_from_config refuses a model without
    m = "img/MAPHead_0"
    rows += [(f"{m}/probe", f"{v}.head.probe", "raw")]
    rows += _block(m, f"{v}.head.attention", "MultiHeadDotProductAttention_0")
    rows += _norm(f"{m}/LayerNorm_0", f"{v}.head.layernorm")
    rows += _dense(f"{m}/MlpBlock_0/Dense_0", f"{v}.head.mlp.fc1")
    rows += _dense(f"{m}/MlpBlock_0/Dense_1", f"{v}.head.mlp.fc2")
  rows += [("txt/Embed_0/embedding", f"{t}.embeddings.token_embedding.weight", "raw"),
           ("txt/pos_embedding", f"{t}.embeddings.position_embedding.weight", "posemb")]
  rows += _encoder("txt/Encoder_0", f"{t}.encoder", text["num_hidden_layers"])
  rows += _norm("txt/Encoder_0/encoder_norm", f"{t}.final_layer_norm")
  rows += _dense("txt/head", f"{t}.head")
  return rows


_IN_PROJ = "vision_model.head.attention.in_proj_"


def _split_in_proj(state: Flat) -> Flat:
  """The MAP head's fused in_proj (torch MultiheadAttention) as q/k/v_proj entries."""
  state = dict(state)
  for part in ("weight", "bias"):
    if _IN_PROJ + part in state:
      for name, array in zip(("q", "k", "v"), np.split(state.pop(_IN_PROJ + part), 3)):
        state[f"vision_model.head.attention.{name}_proj.{part}"] = array
  return state


def _fuse_in_proj(state: Flat) -> Flat:
  state = dict(state)
  for part in ("weight", "bias"):
    names = [f"vision_model.head.attention.{n}_proj.{part}" for n in ("q", "k", "v")]
    if names[0] in state:
      state[_IN_PROJ + part] = np.concatenate([state.pop(n) for n in names])
  return state


def _patch_linear(config, to_ours: bool):
  """SigLIP 2's Linear (D, p*p*C), inputs (row, column, channel) <-> conv kernel (p,p,C,D)."""
  patch = config["vision_config"]["patch_size"]
  if to_ours:
    return lambda w: w.T.reshape(patch, patch, -1, w.shape[0])
  return lambda k: k.reshape(-1, k.shape[-1]).T


def from_hf(state: Flat, config: Dict[str, Any]) -> Flat:
  """HF state dict (numpy arrays) -> our flat TwoTower params ('/'-joined keys)."""
  state = _split_in_proj(state)
  vision_heads = config["vision_config"]["num_attention_heads"]
  text_heads = config["text_config"]["num_attention_heads"]
  flat = {}
  for ours, hf, kind in name_table(config):
    if hf not in state:
      raise errors.InvalidInput(f"the Hugging Face {config['model_type']} checkpoint has no "
                                f"{hf}: pass the folder of a complete SiglipModel / "
                                "Siglip2Model (model.safetensors beside its config.json)")
    heads = text_heads if ours.startswith("txt/") else vision_heads
    fn = _transforms(heads)[kind][0]
    if ours == "img/embedding/kernel" and config["model_type"] == "siglip2":
      fn = _patch_linear(config, to_ours=True)
    flat[ours] = np.asarray(fn(np.asarray(state[hf], np.float32)))
  return flat


def to_hf(flat: Flat, config: Dict[str, Any]) -> Flat:
  """Our flat TwoTower params -> an HF state dict for `config` (the inverse of from_hf). A
  text tower without a head (a pair trained with its own features) is written with an
  identity one: SiglipModel's text model always projects, and so computes the same."""
  if "txt/head/kernel" not in flat:
    width = config["text_config"]["hidden_size"]
    flat = {**flat, "txt/head/kernel": np.eye(width, dtype=np.float32),
            "txt/head/bias": np.zeros(width, np.float32)}
  vision_heads = config["vision_config"]["num_attention_heads"]
  text_heads = config["text_config"]["num_attention_heads"]
  state = {}
  for ours, hf, kind in name_table(config):
    heads = text_heads if ours.startswith("txt/") else vision_heads
    fn = _transforms(heads)[kind][1]
    if ours == "img/embedding/kernel" and config["model_type"] == "siglip2":
      fn = _patch_linear(config, to_ours=False)
    state[hf] = np.ascontiguousarray(fn(np.asarray(flat[ours], np.float32)))
  return _fuse_in_proj(state)


def model_from_config(config: Dict[str, Any]) -> two_tower.TwoTower:
  """The TwoTower a SigLIP / SigLIP 2 config.json describes (tanh GELU, eps 1e-6 as HF's)."""
  if config.get("model_type") not in KINDS:
    raise errors.InvalidInput(f"config.json has model_type {config.get('model_type')!r}; "
                              f"a two-tower folder is one of {', '.join(KINDS)}")
  vision, text = config["vision_config"], config["text_config"]
  if not vision.get("vision_use_head", True):
    raise errors.InvalidInput("the vision tower has no attention-pooling head "
                              "(vision_use_head: false): SiglipModel embeds no image without "
                              "one, so neither does vit_jax")
  for part, cfg in (("vision", vision), ("text", text)):
    act = cfg.get("hidden_act", "gelu_pytorch_tanh")
    if act not in ("gelu_pytorch_tanh", "gelu_new") or cfg.get("layer_norm_eps", 1e-6) != 1e-6:
      raise errors.InvalidInput(f"the {part} tower uses {act} and layer_norm_eps "
                                f"{cfg.get('layer_norm_eps')}; vit_jax runs SigLIP's tanh GELU "
                                "with eps 1e-6 only")
  image = vit.VisionTransformer(
      num_classes=0, patch_size=vision["patch_size"], hidden_size=vision["hidden_size"],
      mlp_dim=vision["intermediate_size"], num_heads=vision["num_attention_heads"],
      num_layers=vision["num_hidden_layers"], classifier="map")
  txt = text_tower.TextTransformer(
      num_classes=text.get("projection_size") or text["hidden_size"], width=text["hidden_size"],
      depth=text["num_hidden_layers"], mlp_dim=text["intermediate_size"],
      num_heads=text["num_attention_heads"], vocab_size=text["vocab_size"],
      max_len=text["max_position_embeddings"])
  return two_tower.TwoTower(image, txt, bias_init=-10.0, temperature_init=10.0)


def config_for(model: two_tower.TwoTower, image_size: int) -> Dict[str, Any]:
  """The SiglipModel config.json of a SigLIP-shaped TwoTower (what model_from_config reads
  back): fixed resolution, as transformers runs SigLIP and SigLIP 2 FixRes models."""
  img, txt = model.img, model.txt
  if model.family != "siglip" or not isinstance(txt, text_tower.TextTransformer) or (
      img.classifier != "map" or img.posemb != "learn" or model.image_head):
    raise errors.InvalidInput("only SigLIP-shaped models (MAP-pooled image tower, text "
                              "transformer, a logit bias) have a Hugging Face SiglipModel form; "
                              "LiT models stay .npz files")
  common = {"hidden_act": "gelu_pytorch_tanh", "layer_norm_eps": 1e-6, "attention_dropout": 0.0}
  return {
      "architectures": ["SiglipModel"], "model_type": "siglip",
      "text_config": {**common, "vocab_size": txt.vocab_size, "hidden_size": txt.width,
                      "intermediate_size": txt.mlp_dim, "num_hidden_layers": txt.depth,
                      "num_attention_heads": txt.num_heads, "max_position_embeddings": txt.max_len,
                      "projection_size": txt.num_classes or txt.width,
                      "model_type": "siglip_text_model"},
      "vision_config": {**common, "hidden_size": img.hidden_size, "intermediate_size": img.mlp_dim,
                        "num_hidden_layers": img.num_layers, "num_attention_heads": img.num_heads,
                        "image_size": image_size, "patch_size": img.patch_size, "num_channels": 3,
                        "model_type": "siglip_vision_model"},
  }


def recognises(state: Dict[str, Any], config: Dict[str, Any]) -> bool:
  """A SigLIP / SigLIP 2 folder (its config.json's model_type)."""
  del state
  return config.get("model_type") in KINDS


def to_released(state: Flat, config: Dict[str, Any], *, notes: bool) -> Flat:
  """Its two towers' arrays (`img/...`: what a classifier fine-tuned from it loads)."""
  del notes
  try:
    model_from_config(config)  # refuses what vit_jax's SigLIP cannot run
  except errors.InvalidInput as e:
    raise errors.InvalidInput(f"is a SigLIP folder that vit_jax cannot read: {e}") from None
  return from_hf(state, config)
