"""Maps the layouts of released and related .npz files onto our parameter names.

Our module names are the released (pre-Linen) names, so the released layout needs
no mapping. The variants seen in the wild do:
  * `opt/target/` (old Flax optimizer), `params/` or `params/img/` (the image tower of a
    big_vision two-tower model) prefixes;
  * Linen numbering inside a block (`LayerNorm_1`, `MultiHeadDotProductAttention_0`,
    `MlpBlock_0`) as written by Linen-era code;
  * big_vision scan-stacked blocks `Transformer/encoderblock/...` (leading depth axis)
    and its top-level `pos_embedding`, which it adds before prepending the class token
    (older big_vision files: `Transformer/pos_embedding`, or a table that already has
    the class-token row; a MAP head inlined at the top level instead of `MAPHead_0`);
  * big_vision's other ViT variants, which need no mapping: `MAPHead_0` (classifier
    'map'), no position-embedding table (posemb 'sincos2d'), no class token ('gap').
  * GroupNorm scale/bias stored as (1, 1, 1, C) by old code.

Keys whose rank or dtype fits no layout raise LayoutError naming the key and what a
checkpoint holds there, so a damaged file never reaches numpy as an IndexError.
"""

import math
import re
from typing import Dict, Optional, Tuple

import numpy as np
from flax import traverse_util

from vit_jax.base import errors
from vit_jax.checkpoints.npz_checks import most_common_size
from vit_jax.families.vit import hybrid_stem
from vit_jax.families.vit import names as vit_names
from vit_jax.models import encoder_blocks

Flat = Dict[str, np.ndarray]

BLOCK = "Transformer/encoderblock_{}"
_STACKED_PREFIX = f"Transformer/{encoder_blocks.SCANNED_BLOCKS}/"
POSEMB = "Transformer/posembed_input/pos_embedding"
_LINEN_TO_RELEASED = {
    "LayerNorm_0": "LayerNorm_0",
    "MultiHeadDotProductAttention_0": "MultiHeadDotProductAttention_1",
    "LayerNorm_1": "LayerNorm_2",
    "MlpBlock_0": "MlpBlock_3",
}
_PREFIXES = ("opt/target/", "params/img/", "params/", "img/")
MAP_HEAD = "MAPHead_0"
_INLINED_MAP_HEAD = ("probe", "MlpBlock_0", "MultiHeadDotProductAttention_0", "LayerNorm_0")
_WEIGHT_KINDS = "fiu"  # float, int, unsigned: numbers that float32 holds


class LayoutError(errors.InvalidInput):
  """A key whose rank, sizes or dtype fit no checkpoint layout; the message names it."""


def _expect_rank(key: str, value: np.ndarray, ndim: int, what: str) -> np.ndarray:
  """value, if it is an ndim-D array with no empty axis; what: its axes, for the message."""
  if value.ndim != ndim or 0 in value.shape:
    raise LayoutError(f"{key} has shape {value.shape}, expected a {ndim}-D {what}")
  return value


def _strip_prefix(flat: Flat) -> Flat:
  """Keeps only the model weights under a known prefix (optimizer state is dropped)."""
  for prefix in _PREFIXES:
    if any(key.startswith(prefix) for key in flat):
      return {k[len(prefix):]: v for k, v in flat.items() if k.startswith(prefix)}
  return flat


def _unstack_blocks(flat: Flat) -> Flat:
  """big_vision's scan-stacked `Transformer/encoderblock/X` (depth first) -> per block:
  the layout of our own scan_layers models, converted the same way."""
  if not any(key.startswith(_STACKED_PREFIX) for key in flat):
    return flat
  stacked = {k: v for k, v in flat.items() if k.startswith(_STACKED_PREFIX)}
  depth = max(v.shape[0] if v.ndim else 0 for v in stacked.values())
  for key, value in sorted(stacked.items()):
    if value.ndim == 0 or value.shape[0] != depth or not depth:
      raise LayoutError(f"{key} has shape {value.shape}, expected a leading depth axis of "
                        f"{depth or 'at least 1'} like the other stacked blocks")
  nested = traverse_util.unflatten_dict(flat, sep="/")
  return traverse_util.flatten_dict(encoder_blocks.to_block_layout(nested), sep="/")


def _renumber_linen_blocks(flat: Flat) -> Flat:
  """Renames Linen-numbered block children to the released numbering, block by block."""
  linen_blocks = {m.group(1) for key in flat
                  if (m := re.match(r"(Transformer/encoderblock_\d+)/MlpBlock_0/", key))}
  out = {}
  for key, value in flat.items():
    match = re.match(r"(Transformer/encoderblock_\d+)/([^/]+)(/.*)", key)
    if match and match.group(1) in linen_blocks:
      block, child, rest = match.groups()
      key = f"{block}/{_LINEN_TO_RELEASED.get(child, child)}{rest}"
    out[key] = value
  return out


def released_blocks(flat: Flat) -> Flat:
  """`Transformer/` blocks in the released per-block layout and numbering, whether stacked
  (scan) or Linen-numbered (big_vision): the encoder part of to_released_layout, which the
  text towers of two-tower files share (vit_jax.families.two_tower.npz_layout)."""
  return _renumber_linen_blocks(_unstack_blocks(flat))


LINEN_TO_RELEASED = _LINEN_TO_RELEASED


def _move_big_vision_posemb(flat: Flat) -> Flat:
  """big_vision's top-level posemb skips the class token: give that token a zero row.

  Its older files keep it in `Transformer/pos_embedding`, and the oldest ones already
  hold a class-token row (1 + a square number of rows): kept as it is, or dropped, as
  big_vision does, when there is no class token."""
  key = next((k for k in ("pos_embedding", "Transformer/pos_embedding") if k in flat), None)
  if key is None:
    return flat
  flat = dict(flat)
  posemb = _expect_rank(key, flat.pop(key), 3, "(1, patches, hidden) table")
  rows = posemb.shape[1]
  has_cls_row = rows > 1 and math.isqrt(rows - 1)**2 == rows - 1
  if "cls" in flat and not has_cls_row:
    posemb = np.concatenate([np.zeros_like(posemb[:, :1]), posemb], axis=1)
  elif "cls" not in flat and has_cls_row:
    posemb = posemb[:, 1:]
  flat[POSEMB] = posemb
  return flat


def _nest_inlined_map_head(flat: Flat) -> Flat:
  """A MAP head written at the top level (big_vision during ViT-G) -> `MAPHead_0/`."""
  if "probe" not in flat:
    return flat
  inlined = lambda key: key.split("/", 1)[0] in _INLINED_MAP_HEAD
  return {f"{MAP_HEAD}/{k}" if inlined(k) else k: v for k, v in flat.items()}


_GROUP_NORM = re.compile(r"(^|/)gn[^/]*/(scale|bias)$")


def _squeeze_group_norm(flat: Flat) -> Flat:
  """(1, 1, 1, C) GroupNorm scale/bias -> (C,)."""
  def fix(key, value):
    return value.reshape(-1) if _GROUP_NORM.search(key) and value.ndim == 4 else value
  return {key: fix(key, value) for key, value in flat.items()}


def to_saved_layout(flat: Flat) -> Flat:
  """Our flat params -> the released files' shapes: GroupNorm scale/bias as (1, 1, 1, C),
  as the original code and the converters written for its files expect."""
  def fix(key, value):
    return value.reshape(1, 1, 1, -1) if _GROUP_NORM.search(key) and value.ndim == 1 else value
  return {key: fix(key, value) for key, value in flat.items()}


def to_released_layout(flat: Flat) -> Flat:
  """Any supported variant -> the released key set (what our params flatten to)."""
  for step in (_strip_prefix, _unstack_blocks, _renumber_linen_blocks,
               _move_big_vision_posemb, _nest_inlined_map_head, _squeeze_group_norm):
    flat = step(flat)
  return flat


def check_dtypes(flat: Flat) -> None:
  """Weights must be numbers: a bool or string array would otherwise turn into 0/1
  weights silently, or fail in a float32 conversion that names no key."""
  for key, value in sorted(flat.items()):
    if value.dtype.kind not in _WEIGHT_KINDS:
      raise LayoutError(f"{key} holds {value.dtype} values, expected floating-point weights")


def _require(flat: Flat, key: str, ndim: Optional[int] = None, what: str = "") -> np.ndarray:
  if key not in flat:
    raise KeyError(key)
  return flat[key] if ndim is None else _expect_rank(key, flat[key], ndim, what)


def infer_architecture(flat: Flat) -> Tuple[vit_names.Architecture, Optional[int], Optional[int]]:
  """(architecture, num_classes, representation_size) read off released-layout shapes.

  Raises KeyError naming the first key a ViT checkpoint must have but this lacks, and
  LayoutError for an array this reads whose rank or sizes no ViT has.
  """
  embedding = _require(flat, "embedding/kernel", 4, "(patch, patch, channels, hidden) kernel")
  first_block = BLOCK.format(0)
  num_layers = 0
  while f"{BLOCK.format(num_layers)}/LayerNorm_0/scale" in flat:
    num_layers += 1
  if not num_layers:
    raise KeyError(f"{first_block}/LayerNorm_0/scale")
  query_key = f"{first_block}/MultiHeadDotProductAttention_1/query/kernel"
  query = _require(flat, query_key, 3, "(hidden, heads, head_dim) kernel")
  _require(flat, f"{first_block}/MlpBlock_3/Dense_0/kernel", 2, "(hidden, mlp_dim) kernel")
  # Each size is what most arrays carrying it say: an edited or damaged array is then the
  # one check_against names, not the intact arrays that disagree with it.
  hidden = most_common_size(flat, [("embedding/kernel", -1), ("encoder_norm/scale", -1)] + [
      (f"{BLOCK.format(i)}/LayerNorm_0/scale", -1) for i in range(num_layers)])
  mlp_dim = most_common_size(flat, [(f"{BLOCK.format(i)}/MlpBlock_3/{key}", axis)
                                    for i in range(num_layers) for key, axis in (
                                        ("Dense_0/kernel", -1), ("Dense_0/bias", -1),
                                        ("Dense_1/kernel", 0))])
  num_heads = most_common_size(flat, [
      (f"{BLOCK.format(i)}/MultiHeadDotProductAttention_1/{name}/kernel", 1)
      for i in range(num_layers) for name in ("query", "key", "value")])
  if query.shape[0] != hidden or query.shape[1] * query.shape[2] != hidden:
    raise LayoutError(f"{query_key} has shape {query.shape}, expected (hidden, heads, "
                      f"hidden / heads) with the other arrays' hidden size {hidden}")
  if POSEMB in flat:
    posemb = _expect_rank(POSEMB, flat[POSEMB], 3, "(1, tokens, hidden) table")
    if posemb.shape[0] != 1 or posemb.shape[2] != hidden or posemb.shape[1] <= ("cls" in flat):
      raise LayoutError(f"{POSEMB} has shape {posemb.shape}, expected (1, tokens, {hidden}) "
                        "with at least one patch token")
  elif hidden % 4 or hidden < 8:  # no table: big_vision's fixed sincos2d embedding
    raise LayoutError(f"the file has no {POSEMB} (a big_vision posemb='sincos2d' model has "
                      f"none), but sincos2d needs a hidden size that is a multiple of 4 and at "
                      f"least 8, not {hidden}")
  if "cls" in flat and any(key.startswith(MAP_HEAD + "/") for key in flat):
    raise LayoutError(f"the file has both a class token (cls) and a MAP head ({MAP_HEAD}); "
                      "a ViT pools with one of them")

  resnet_stages, resnet_width = None, 1
  if "conv_root/kernel" in flat:
    root = _expect_rank("conv_root/kernel", flat["conv_root/kernel"], 4,
                        "(7, 7, 3, width) kernel")
    if root.shape[-1] % hybrid_stem.GROUP_NORM_GROUPS:
      raise LayoutError(f"conv_root/kernel has {root.shape[-1]} filters, expected a multiple "
                        f"of GroupNorm's {hybrid_stem.GROUP_NORM_GROUPS} groups")
    resnet_width = root.shape[-1] / 64
    resnet_stages = []
    while any(k.startswith(f"block{len(resnet_stages) + 1}/") for k in flat):
      stage = len(resnet_stages) + 1
      resnet_stages.append(len({k.split("/")[1] for k in flat if k.startswith(f"block{stage}/")}))
    resnet_stages = tuple(resnet_stages)
    if resnet_width == int(resnet_width):
      resnet_width = int(resnet_width)

  architecture = vit_names.Architecture(
      patch_size=embedding.shape[0], hidden_size=hidden,
      mlp_dim=mlp_dim, num_heads=num_heads, num_layers=num_layers,
      resnet_stages=resnet_stages, resnet_width=resnet_width,
      classifier=classifier(flat), posemb="learn" if POSEMB in flat else "sincos2d")
  known = vit_names.find_name(architecture)
  if known:  # keep the reference default dropout of the released model
    architecture = vit_names.RELEASED[known]
  return architecture, _features(flat, "head"), _features(flat, "pre_logits")


def classifier(flat: Flat) -> str:
  """How released-layout arrays pool the tokens: a class token, a MAP head, or the mean."""
  if "cls" in flat:
    return "token"
  return "map" if any(key.startswith(MAP_HEAD + "/") for key in flat) else "gap"


def _features(flat: Flat, dense: str) -> Optional[int]:
  """Output size of an optional top-level Dense layer (head, pre_logits), or None."""
  key = f"{dense}/kernel"
  if key not in flat:
    return None
  return _expect_rank(key, flat[key], 2, "(inputs, outputs) kernel").shape[-1]
