"""Two-tower .npz layouts (LiT's `gs://vit_models/lit/*.npz`, big_vision's SigLIP / SigLIP 2
`.npz`) <-> this project's TwoTower parameter names, and the geometry read off the arrays.

Files hold `img/...`, `txt/...`, `t` and (SigLIP) `b`, optionally under `params/` or
`opt/target/`. The image tower is a ViT in any layout vit_jax.families.vit.npz_layout reads
(big_vision's scan-stacked, Linen-numbered blocks and top-level `pos_embedding` included).
The text tower is flaxformer's BERT (`BertEncoder_0`, kept as it is) or a text transformer
(`Embed_0`, `pos_embedding`, `Encoder_0`: blocks renamed to the released numbering, as for
the image tower). to_big_vision writes big_vision's own layout back, bit for bit.
"""

from typing import Dict, Optional, Tuple

import numpy as np
from flax import traverse_util

from vit_jax.base import errors
from vit_jax.checkpoints import npz_checks
from vit_jax.families.two_tower import text_tower
from vit_jax.families.two_tower import model as two_tower
from vit_jax.families.vit import npz_layout
from vit_jax.families.vit import model as vit

Flat = Dict[str, np.ndarray]
_PREFIXES = ("params/", "opt/target/")
_TXT_ENCODER = "Encoder_0/"
_BERT = "BertEncoder_0/"
_BERT_LAYER = _BERT + "encoder_block/layer_sequence/layers_{}/"


def holds_both_towers(flat: Flat) -> bool:
  """Whether arrays (any known prefix) hold an image and a text tower."""
  tops = {key.split("/", 2)[1] if key.startswith(_PREFIXES) else key.split("/", 1)[0]
          for key in flat}
  return {"img", "txt"} <= tops


def _sub(flat: Flat, prefix: str) -> Flat:
  return {k[len(prefix):]: v for k, v in flat.items() if k.startswith(prefix)}


def _text_to_ours(txt: Flat) -> Flat:
  """A text transformer's `Encoder_0` blocks in the released numbering (stacked and
  Linen-numbered ones unstacked and renamed); BERT is kept as it is."""
  if any(key.startswith(_BERT) for key in txt):
    return txt
  txt = dict(txt)
  extra = txt.pop(_TXT_ENCODER + "pos_embedding", None)  # older big_vision files add it twice
  if extra is not None and "pos_embedding" in txt:
    txt["pos_embedding"] = txt["pos_embedding"] + extra
  renamed = {("Transformer/" + k[len(_TXT_ENCODER):] if k.startswith(_TXT_ENCODER) else k): v
             for k, v in txt.items()}
  renamed = npz_layout.released_blocks(renamed)
  return {(_TXT_ENCODER + k[len("Transformer/"):] if k.startswith("Transformer/") else k): v
          for k, v in renamed.items()}


def to_ours(flat: Flat) -> Flat:
  """Any two-tower layout -> TwoTower's flat names ('img/...', 'txt/...', 't', 'b')."""
  for prefix in _PREFIXES:
    if any(key.startswith(prefix) for key in flat):
      flat = _sub(flat, prefix)
      break
  out = {"img/" + k: v for k, v in npz_layout.to_released_layout(_sub(flat, "img/")).items()}
  out.update({"txt/" + k: v for k, v in _text_to_ours(_sub(flat, "txt/")).items()})
  out.update({k: v for k, v in flat.items() if k in ("t", "b")})
  return out


def _to_big_vision_blocks(flat: Flat, encoder: str) -> Flat:
  """`{encoder}encoderblock_i/` released numbering -> big_vision's stacked `encoderblock/`
  with Linen numbering."""
  released_to_linen = {v: k for k, v in npz_layout.LINEN_TO_RELEASED.items()}
  blocks = {}
  rest = {}
  for key, value in flat.items():
    if key.startswith(encoder + "encoderblock_"):
      block, child, tail = key[len(encoder):].split("/", 2)
      blocks.setdefault(int(block.rsplit("_", 1)[1]), {})[
          f"{released_to_linen[child]}/{tail}"] = value
    else:
      rest[key] = value
  if blocks:
    depth = len(blocks)
    for name in blocks[0]:
      rest[f"{encoder}encoderblock/{name}"] = np.stack([blocks[i][name] for i in range(depth)])
  return rest


def to_big_vision(flat: Flat) -> Flat:
  """TwoTower's flat names -> big_vision's layout (scan-stacked Linen-numbered blocks,
  top-level image `pos_embedding` without a class-token row); BERT and LiT's class-token
  image towers stay in their released layout."""
  out = dict(flat)
  if "img/cls" not in out and npz_layout.POSEMB in _sub(out, "img/"):
    out["img/pos_embedding"] = out.pop("img/" + npz_layout.POSEMB)
  if "img/cls" not in out:
    out = _to_big_vision_blocks(out, "img/Transformer/")
  return _to_big_vision_blocks(out, "txt/" + _TXT_ENCODER)


def _count(flat: Flat, template: str) -> int:
  depth = 0
  while any(k.startswith(template.format(depth)) for k in flat):
    depth += 1
  return depth


def _text_tower(txt: Flat, bert_heads: Optional[int]):
  """The text tower the arrays describe (BERT or a text transformer)."""
  head = txt["head/kernel"].shape[1] if "head/kernel" in txt else None
  if any(key.startswith(_BERT) for key in txt):
    layer = _BERT_LAYER.format(0)
    vocab, width = txt[_BERT + "embedder/embedders_token_ids/embedding"].shape
    heads = bert_heads or _BERT_HEADS.get(width, max(1, width // 64))
    return text_tower.BertTextEncoder(
        head, width, _count(txt, _BERT_LAYER),
        txt[layer + "mlp_block/mlp/dense_layer/kernel"].shape[1],
        heads, vocab, txt[_BERT + "embedder/embedders_position_ids/embedding"].shape[0],
        txt[_BERT + "embedder/embedders_segment_ids/embedding"].shape[0])
  block = _TXT_ENCODER + "encoderblock_0/"
  vocab, width = txt["Embed_0/embedding"].shape
  return text_tower.TextTransformer(
      head, width, _count(txt, _TXT_ENCODER + "encoderblock_{}/"),
      txt[block + "MlpBlock_3/Dense_0/kernel"].shape[1],
      txt[block + "MultiHeadDotProductAttention_1/query/kernel"].shape[1], vocab,
      txt["pos_embedding"].shape[1])


# BERT's 2-D kernels do not show the head count: BERT-base (768) has 12, BERT-large (1024)
# 16, as flaxformer's configs; other widths are taken as 64 per head unless
# build_model(..., bert_heads=N) names it.
_BERT_HEADS = {768: 12, 1024: 16}


def build_model(flat: Flat, bert_heads: Optional[int] = None
                ) -> Tuple[two_tower.TwoTower, Flat]:
  """(TwoTower, its flat params) from two-tower arrays in our names (to_ours)."""
  img = _sub(flat, "img/")
  txt = _sub(flat, "txt/")
  missing = [k for k in ("t",) if k not in flat]
  if missing or not img or not txt:
    raise errors.InvalidInput("the file is no complete two-tower model: it needs img/, txt/ "
                              f"and t arrays, and has {npz_checks.describe(flat)}")
  try:
    architecture, head, representation = npz_layout.infer_architecture(img)
  except KeyError as e:
    raise errors.InvalidInput(f"the image tower lacks img/{e.args[0]}: pass a complete "
                              "LiT / SigLIP file") from None
  kwargs = architecture.as_kwargs()
  kwargs.pop("dropout_rate")
  image = vit.VisionTransformer(num_classes=head or 0, representation_size=representation,
                                **kwargs)
  model = two_tower.TwoTower(
      image, _text_tower(txt, bert_heads), image_head=head is not None,
      bias_init=-10.0 if "b" in flat else None,
      temperature_init=10.0 if "b" in flat else 1.0)
  return model, flat


def unflatten(flat: Flat):
  """Flat '/'-joined names -> the nested params TwoTower.apply takes."""
  return traverse_util.unflatten_dict(flat, sep="/")
