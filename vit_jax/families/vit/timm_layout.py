"""timm's VisionTransformer and its ResNetV2 hybrids: state-dict names, model names and
the constructor arguments that make timm compute what our model computes.

What timm needs told (`create_model` arguments; the rest of its defaults match ours):
  * act_layer='gelu_tanh': our MLPs use the tanh GELU of the original code; timm's default
    is the exact GELU;
  * global_pool: 'token' (class token), 'avg' with fc_norm=False (ours, like the original
    'gap' models, normalises the tokens and then averages; timm's 'avg' default averages
    and then normalises) or 'map' (big_vision's attention pooling) with class_token=False;
  * img_size, patch_size, embed_dim, depth, num_heads, mlp_ratio, num_classes.
Differences no argument removes (hybrids only): timm's StdConv2dSame standardises
kernels as (w - mean) / sqrt(var + 1e-8), ours as (w - mean) / (std + 1e-5), and its
GroupNorm eps is 1e-5 (ours 1e-6): R50+B/16 logits differ by 5e-5 to 1.1e-4 relative
(random weights; 7e-6 for the root-only R+Ti/16 stem).
"""

from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from vit_jax.base import errors
from vit_jax.base import console
from vit_jax.checkpoints import torch_layout
from vit_jax.checkpoints.torch_layout import linear, norm, projections, Rule, rule
from vit_jax.families.vit import npz_layout
from vit_jax.families.vit import config_consistency
from vit_jax.families.vit import names as vit_names

BLOCK = "Transformer/encoderblock_{i}"
ATTENTION = BLOCK + "/MultiHeadDotProductAttention_1"
MAP = npz_layout.MAP_HEAD
MAP_ATTENTION = MAP + "/MultiHeadDotProductAttention_0"
BACKBONE = "patch_embed.backbone"
TANH_GELU = "gelu_tanh"
POOLS = {"token": "token", "gap": "avg", "map": "map"}  # our classifier -> global_pool

# Explanations for timm arrays that have no place in our model.
UNSUPPORTED = {
    "fc_norm": "a LayerNorm after pooling (timm's global_pool='avg' default; ours normalises "
               "the tokens before averaging, export those with fc_norm=False)",
    "reg_token": "register tokens", "norm_pre": "a LayerNorm before the blocks (pre_norm)",
    ".ls1.": "LayerScale (init_values)", ".ls2.": "LayerScale (init_values)",
    "q_norm": "query/key normalisation (qk_norm)", "head_drop": "", "attn_pool.pos_embed": "",
}


def rules(stem_only: bool = False) -> List[Rule]:
  """Every array of a ViT, MAP head and ResNetV2 hybrid stem (root-only when stem_only)."""
  stem = BACKBONE if stem_only else f"{BACKBONE}.stem"
  unit, timm_unit = "block{s}/unit{u}", f"{BACKBONE}.stages.{{s0}}.blocks.{{u0}}"
  resnet = [rule("conv_root/kernel", f"{stem}.conv.weight", "conv"),
            *norm("gn_root", f"{stem}.norm"),
            rule(f"{unit}/conv_proj/kernel", f"{timm_unit}.downsample.conv.weight", "conv"),
            *norm(f"{unit}/gn_proj", f"{timm_unit}.downsample.norm")]
  for k in (1, 2, 3):
    resnet += [rule(f"{unit}/conv{k}/kernel", f"{timm_unit}.conv{k}.weight", "conv"),
               *norm(f"{unit}/gn{k}", f"{timm_unit}.norm{k}")]
  return [
      rule("cls", "cls_token"), rule(npz_layout.POSEMB, "pos_embed"),
      *linear("embedding", "patch_embed.proj", "conv"),
      *norm(f"{BLOCK}/LayerNorm_0", "blocks.{i}.norm1"),
      *projections(ATTENTION, ("query", "key", "value"), "blocks.{i}.attn.qkv"),
      *linear(f"{ATTENTION}/out", "blocks.{i}.attn.proj", "out"),
      *norm(f"{BLOCK}/LayerNorm_2", "blocks.{i}.norm2"),
      *linear(f"{BLOCK}/MlpBlock_3/Dense_0", "blocks.{i}.mlp.fc1"),
      *linear(f"{BLOCK}/MlpBlock_3/Dense_1", "blocks.{i}.mlp.fc2"),
      *norm("Transformer/encoder_norm", "norm"),
      rule(f"{MAP}/probe", "attn_pool.latent"),
      *projections(MAP_ATTENTION, ("query",), "attn_pool.q"),
      *projections(MAP_ATTENTION, ("key", "value"), "attn_pool.kv"),
      *linear(f"{MAP_ATTENTION}/out", "attn_pool.proj", "out"),
      *norm(f"{MAP}/LayerNorm_0", "attn_pool.norm"),
      *linear(f"{MAP}/MlpBlock_0/Dense_0", "attn_pool.mlp.fc1"),
      *linear(f"{MAP}/MlpBlock_0/Dense_1", "attn_pool.mlp.fc2"),
      *linear("head", "head"),
      *resnet,
  ]


# timm's names for our model sizes, and its registered resolutions for each.
_SIZES = {(192, 12, 3): "tiny", (384, 12, 6): "small", (768, 12, 12): "base",
          (1024, 24, 16): "large", (1280, 32, 16): "huge"}
_REGISTERED = {
    "vit_tiny_patch16": (224, 384), "vit_small_patch16": (224, 384),
    "vit_small_patch32": (224, 384), "vit_small_patch8": (224,),
    "vit_base_patch16": (224, 384), "vit_base_patch32": (224, 384), "vit_base_patch8": (224,),
    "vit_large_patch16": (224, 384), "vit_large_patch32": (224, 384),
    "vit_large_patch14": (224,), "vit_huge_patch14": (224,),
    "vit_tiny_r_s16_p8": (224, 384), "vit_small_r26_s32": (224, 384),
    "vit_base_r26_s32": (224,), "vit_base_r50_s16": (224, 384), "vit_large_r50_s32": (224, 384),
}
# ResNetV2 stems timm builds (fixed by the model name), by our resnet_stages and hidden size.
_HYBRIDS = {(): {None: "vit_tiny_r_s16_p8"},
            (2, 2, 2, 2): {384: "vit_small_r26_s32", None: "vit_base_r26_s32"},
            (3, 4, 9): {None: "vit_base_r50_s16"}, (3, 4, 6, 3): {None: "vit_large_r50_s32"}}
# timm has no parameter that holds the head count: defaults by width for bare state dicts.
_HEADS_BY_WIDTH = {192: 3, 384: 6, 768: 12, 1024: 16, 1152: 16, 1280: 16, 1408: 16, 1664: 16}
_HEADS_BY_SIZE = {"tiny": 3, "small": 6, "medium": 8, "base": 12, "large": 16, "huge": 16,
                  "so400m": 16, "giant": 16, "gigantic": 16}


class Unsupported(errors.InvalidInput):
  """An architecture that no timm model computes; the message says which part."""


def mlp_ratio(hidden: int, mlp_dim: int) -> float:
  """A ratio that timm turns back into mlp_dim (it truncates int(hidden * ratio))."""
  ratio = mlp_dim / hidden
  return ratio if int(hidden * ratio) == mlp_dim else (mlp_dim + 0.5) / hidden


def _base_name(arch: vit_names.Architecture) -> str:
  if arch.resnet_stages is not None:
    if arch.resnet_width != 1 or tuple(arch.resnet_stages) not in _HYBRIDS:
      raise Unsupported(f"timm builds ResNetV2 stems of stages {', '.join(map(str, _HYBRIDS))} "
                        f"at width 1 only; this hybrid has stages {tuple(arch.resnet_stages)} "
                        f"at width {arch.resnet_width}")
    by_width = _HYBRIDS[tuple(arch.resnet_stages)]
    return by_width.get(arch.hidden_size, by_width[None])
  size = _SIZES.get((arch.hidden_size, arch.num_layers, arch.num_heads))
  name = f"vit_{size}_patch{arch.patch_size}"
  return name if name in _REGISTERED else "vit_base_patch16"


def model_name_and_args(arch: vit_names.Architecture, num_classes: Optional[int],
                        image_size: Tuple[int, int]) -> Tuple[str, Dict[str, Any]]:
  """(timm model name, create_model keyword arguments) that compute our function.

  The name picks timm's builder (for hybrids: its ResNetV2 stem); the arguments state
  every size, so a non-zoo architecture gets a registered name plus its own sizes."""
  base = _base_name(arch)
  side = image_size[0] if image_size[0] == image_size[1] else None
  name = f"{base}_{side if side in _REGISTERED[base] else 224}"
  args = dict(img_size=side or list(image_size), patch_size=arch.patch_size,
              embed_dim=arch.hidden_size, depth=arch.num_layers, num_heads=arch.num_heads,
              mlp_ratio=mlp_ratio(arch.hidden_size, arch.mlp_dim), num_classes=num_classes or 0,
              global_pool=POOLS[arch.classifier], class_token=arch.classifier == "token",
              act_layer=TANH_GELU)
  if arch.classifier == "gap":
    args["fc_norm"] = False
  return name, args


def heads_for(model_args: Dict[str, Any], architecture: Optional[str], width: int) -> int:
  """The head count of a timm model: its arguments, else its name's size, else by width."""
  if model_args.get("num_heads"):
    return int(model_args["num_heads"])
  size = (architecture or "").split("_")[1] if (architecture or "").count("_") else ""
  if size in _HEADS_BY_SIZE and not model_args.get("embed_dim"):
    return _HEADS_BY_SIZE[size]
  if width in _HEADS_BY_WIDTH:
    return _HEADS_BY_WIDTH[width]
  if width % 64 == 0:
    return width // 64
  raise Unsupported(f"cannot tell the head count of a {width}-wide timm ViT from its weights: "
                    "save it with a config.json holding model_args.num_heads")


def explain(keys) -> str:
  """Why timm arrays without a place in our model have none, where known."""
  reasons = sorted({why for key in keys for part, why in UNSUPPORTED.items()
                    if part in key and why})
  return f" ({'; '.join(reasons)})" if reasons else ""


def check_pooling(model_args: Dict[str, Any], has_cls: bool) -> None:
  """Refuses timm poolings our model does not compute, naming them."""
  pool = model_args.get("global_pool", "token" if has_cls else "avg")
  if pool not in ("token", "avg", "map"):
    raise Unsupported(f"timm global_pool={pool!r} has no vit_jax counterpart (token, avg, map)")
  if has_cls and pool != "token":
    raise Unsupported(f"timm global_pool={pool!r} with a class token: vit_jax pools with "
                      "either the class token or, without one, the mean or a MAP head")


def gelu_note(act_layer: Optional[str]) -> Optional[str]:
  """A note when timm's model computes another activation than our tanh GELU."""
  if act_layer in (TANH_GELU, "gelu_pytorch_tanh"):
    return None
  what = "its default, the exact GELU" if act_layer is None else f"act_layer={act_layer!r}"
  return (f"the timm model uses {what}; vit_jax computes the tanh-approximate GELU of the "
          "original ViT code: logits move by ~1e-4 relative (random timm ViT-Ti/B weights; "
          "more for weights trained with the exact GELU)")


def recognises(state: Dict[str, Any], config: Dict[str, Any]) -> bool:
  """A timm VisionTransformer state dict (its patch_embed conv)."""
  del config
  return "patch_embed.proj.weight" in state


def to_released(state: Dict[str, Any], config: Dict[str, Any], *, notes: bool) -> Dict[str, Any]:
  """A timm VisionTransformer state dict (with its config.json's model_args, if any) in the
  released layout; notes: log what timm computes differently (its GELU)."""
  args = {**{k: config[k] for k in ("global_pool",) if k in config},
          **config.get("model_args", {})}
  if "attn_pool.latent" in state:
    args.setdefault("global_pool", "map")
  has_cls = "cls_token" in state
  check_pooling(args, has_cls)
  if args.get("class_token") is False and has_cls:
    raise Unsupported("has a cls_token although its model_args say class_token=False")
  posemb = state.get("pos_embed")
  if has_cls and posemb is not None and posemb.ndim == 3 and posemb.shape[1] > 1 and (
      np.sqrt(posemb.shape[1]) % 1 == 0):  # no_embed_class: no row for the class token
    state = {**state, "pos_embed": np.concatenate([np.zeros_like(posemb[:, :1]), posemb], 1)}
  width = state["patch_embed.proj.weight"].shape[0]
  heads = heads_for(args, config.get("architecture"), width)
  stem_only = f"{BACKBONE}.conv.weight" in state
  try:
    flat = torch_layout.from_torch(state, rules(stem_only), heads, "timm")
  except torch_layout.LayoutMismatch as e:
    raise Unsupported(f"{e}{explain(e.keys)}") from None
  note = gelu_note(args.get("act_layer"))
  if note and notes:
    console.log.warning(note)
  config_consistency.check(config, flat, "timm")
  return flat
