"""Maps the layouts of released and related .npz files onto our parameter names.

Our module names are the released (pre-Linen) names, so the released layout needs
no mapping. The variants seen in the wild do:
  * `opt/target/` (old Flax optimizer) or `params/` prefixes;
  * Linen numbering inside a block (`LayerNorm_1`, `MultiHeadDotProductAttention_0`,
    `MlpBlock_0`) as written by Linen-era code;
  * big_vision scan-stacked blocks `Transformer/encoderblock/...` (leading depth axis)
    and its top-level `pos_embedding`, which it adds before prepending the class token;
  * GroupNorm scale/bias stored as (1, 1, 1, C) by old code.
"""

import re
from typing import Dict, Optional, Tuple

import numpy as np
from flax import traverse_util

from vit_jax.models import vit, zoo

Flat = Dict[str, np.ndarray]

BLOCK = "Transformer/encoderblock_{}"
_STACKED_PREFIX = f"Transformer/{vit.SCANNED_BLOCKS}/"
POSEMB = "Transformer/posembed_input/pos_embedding"
_LINEN_TO_RELEASED = {
    "LayerNorm_0": "LayerNorm_0",
    "MultiHeadDotProductAttention_0": "MultiHeadDotProductAttention_1",
    "LayerNorm_1": "LayerNorm_2",
    "MlpBlock_0": "MlpBlock_3",
}
_PREFIXES = ("opt/target/", "params/")


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
  nested = traverse_util.unflatten_dict(flat, sep="/")
  return traverse_util.flatten_dict(vit.to_block_layout(nested), sep="/")


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


def _move_big_vision_posemb(flat: Flat) -> Flat:
  """big_vision's top-level posemb skips the class token: give that token a zero row."""
  if "pos_embedding" not in flat:
    return flat
  flat = dict(flat)
  posemb = flat.pop("pos_embedding")
  if "cls" in flat:
    posemb = np.concatenate([np.zeros_like(posemb[:, :1]), posemb], axis=1)
  flat[POSEMB] = posemb
  return flat


def _squeeze_group_norm(flat: Flat) -> Flat:
  """(1, 1, 1, C) GroupNorm scale/bias -> (C,)."""
  def fix(key, value):
    is_gn = re.search(r"(^|/)gn[^/]*/(scale|bias)$", key)
    return value.reshape(-1) if is_gn and value.ndim == 4 else value
  return {key: fix(key, value) for key, value in flat.items()}


def to_released_layout(flat: Flat) -> Flat:
  """Any supported variant -> the released key set (what our params flatten to)."""
  for step in (_strip_prefix, _unstack_blocks, _renumber_linen_blocks,
               _move_big_vision_posemb, _squeeze_group_norm):
    flat = step(flat)
  return flat


def _require(flat: Flat, key: str) -> np.ndarray:
  if key not in flat:
    raise KeyError(key)
  return flat[key]


def infer_architecture(flat: Flat) -> Tuple[zoo.Architecture, Optional[int], Optional[int]]:
  """(architecture, num_classes, representation_size) read off released-layout shapes.

  Raises KeyError naming the first key a ViT checkpoint must have but this lacks.
  """
  embedding = _require(flat, "embedding/kernel")
  first_block = BLOCK.format(0)
  num_layers = 0
  while f"{BLOCK.format(num_layers)}/LayerNorm_0/scale" in flat:
    num_layers += 1
  if not num_layers:
    raise KeyError(f"{first_block}/LayerNorm_0/scale")
  query = _require(flat, f"{first_block}/MultiHeadDotProductAttention_1/query/kernel")
  mlp = _require(flat, f"{first_block}/MlpBlock_3/Dense_0/kernel")

  resnet_stages, resnet_width = None, 1
  if "conv_root/kernel" in flat:
    resnet_width = flat["conv_root/kernel"].shape[-1] / 64
    resnet_stages = []
    while any(k.startswith(f"block{len(resnet_stages) + 1}/") for k in flat):
      stage = len(resnet_stages) + 1
      resnet_stages.append(len({k.split("/")[1] for k in flat if k.startswith(f"block{stage}/")}))
    resnet_stages = tuple(resnet_stages)
    if resnet_width == int(resnet_width):
      resnet_width = int(resnet_width)

  architecture = zoo.Architecture(
      patch_size=embedding.shape[0], hidden_size=embedding.shape[-1],
      mlp_dim=mlp.shape[-1], num_heads=query.shape[1], num_layers=num_layers,
      resnet_stages=resnet_stages, resnet_width=resnet_width,
      classifier="token" if "cls" in flat else "gap")
  known = zoo.find_name(architecture)
  if known:  # keep the reference default dropout of the released model
    architecture = zoo.RELEASED[known]
  num_classes = flat["head/kernel"].shape[-1] if "head/kernel" in flat else None
  representation = flat["pre_logits/kernel"].shape[-1] if "pre_logits/kernel" in flat else None
  return architecture, num_classes, representation
