"""Hugging Face transformers' ViT (`model_type: vit`): state-dict names as its files store
them, and the config.json / preprocessor_config.json that make it compute our function.

  * ViTForImageClassification (prefix `vit.`, head `classifier`) classifies the class
    token after the final LayerNorm: our classifier='token' models, learned or sincos2d
    position embeddings (the latter as a table whose class-token row is zero).
  * ViTModel (no prefix) has a `pooler`, Dense + tanh on the class token: exactly our
    pre_logits layer, which ViTForImageClassification does not have. A model with neither
    head nor pre_logits is a ViTModel without pooler (add_pooling_layer=False).
  * hidden_act='gelu_pytorch_tanh' (our tanh GELU), layer_norm_eps=1e-6 (transformers'
    default is 1e-12), image_mean = image_std = 0.5 with rescale 1/255: (x - 127.5) / 127.5.
transformers 5 has no ViT without a class token, with a MAP head or with a ResNet stem
(ViTHybrid was removed): those models convert to timm only.
"""

from typing import Any, Dict, List, Optional, Tuple

from vit_jax.base import errors
from vit_jax.base import console
from vit_jax.checkpoints import torch_layout
from vit_jax.checkpoints.torch_layout import linear, norm, projections, Rule, rule
from vit_jax.families.vit import npz_layout
from vit_jax.families.vit import config_consistency, timm_layout
from vit_jax.families.vit import names as vit_names

BLOCK = "Transformer/encoderblock_{i}"
ATTENTION = BLOCK + "/MultiHeadDotProductAttention_1"
TANH_GELUS = ("gelu_pytorch_tanh", "gelu_new")
LAYER_NORM_EPS = 1e-6
CLASSIFICATION, BACKBONE = "ViTForImageClassification", "ViTModel"
DEFAULT_LABEL = "LABEL_"  # transformers' id2label placeholder: LABEL_0, LABEL_1, ...


def rules(prefix: str) -> List[Rule]:
  """`vit.` for ViTForImageClassification (head: classifier), `` for ViTModel (pooler)."""
  layer = prefix + "encoder.layer.{i}"
  attention = [r for name in ("query", "key", "value")
               for r in projections(ATTENTION, (name,), f"{layer}.attention.attention.{name}")]
  top = linear("head", "classifier") if prefix else linear("pre_logits", "pooler.dense")
  return [
      rule("cls", prefix + "embeddings.cls_token"),
      rule(npz_layout.POSEMB, prefix + "embeddings.position_embeddings"),
      *linear("embedding", prefix + "embeddings.patch_embeddings.projection", "conv"),
      *norm(f"{BLOCK}/LayerNorm_0", f"{layer}.layernorm_before"),
      *attention,
      *linear(f"{ATTENTION}/out", f"{layer}.attention.output.dense", "out"),
      *norm(f"{BLOCK}/LayerNorm_2", f"{layer}.layernorm_after"),
      *linear(f"{BLOCK}/MlpBlock_3/Dense_0", f"{layer}.intermediate.dense"),
      *linear(f"{BLOCK}/MlpBlock_3/Dense_1", f"{layer}.output.dense"),
      *norm("Transformer/encoder_norm", prefix + "layernorm"),
      *top,
  ]


class Unsupported(errors.InvalidInput):
  """A model that transformers' ViT does not compute; the message says which part."""


def check_architecture(arch: vit_names.Architecture) -> None:
  if arch.resnet_stages is not None:
    raise Unsupported("transformers has no ViT with a ResNet stem (ViTHybrid was removed in "
                      "v5): convert hybrids with --to=timm")
  if arch.classifier != "token":
    raise Unsupported(f"transformers' ViT always classifies a class token; this model pools "
                      f"with classifier={arch.classifier!r}: convert it with --to=timm")


def config(arch: vit_names.Architecture, num_classes: Optional[int],
           representation_size: Optional[int], image_size: Tuple[int, int],
           class_names: Optional[List[str]] = None) -> Dict[str, Any]:
  """config.json: ViTForImageClassification, or ViTModel (its pooler is pre_logits; none
  without head and pre_logits); id2label from class_names when they name every class."""
  check_architecture(arch)
  if image_size[0] != image_size[1]:
    raise Unsupported(f"transformers' ViT takes square images; this one is {image_size}")
  names = (class_names if class_names and len(class_names) == num_classes
           else [f"{DEFAULT_LABEL}{k}" for k in range(num_classes or 0)])
  labels = {} if representation_size else {str(k): name for k, name in enumerate(names)}
  return {
      "architectures": [BACKBONE if representation_size or not num_classes
                        else CLASSIFICATION],
      "model_type": "vit", "hidden_size": arch.hidden_size,
      "num_hidden_layers": arch.num_layers, "num_attention_heads": arch.num_heads,
      "intermediate_size": arch.mlp_dim, "hidden_act": TANH_GELUS[0],
      "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0,
      "initializer_range": 0.02, "layer_norm_eps": LAYER_NORM_EPS,
      "image_size": image_size[0], "patch_size": arch.patch_size, "num_channels": 3,
      "qkv_bias": True, "encoder_stride": arch.patch_size,
      "pooler_output_size": representation_size or arch.hidden_size, "pooler_act": "tanh",
      "id2label": labels, "label2id": {v: int(k) for k, v in labels.items()},
      "dtype": "float32",
  }


def class_names(cfg: Dict[str, Any]) -> Optional[List[str]]:
  """The class names of a config's id2label in label order; None when it has none, or only
  transformers' placeholders (LABEL_0, ...)."""
  labels = cfg.get("id2label") or {}
  try:
    names = [str(labels[key]) for key in sorted(labels, key=int)]
  except (TypeError, ValueError):
    return None
  if not names or names == [f"{DEFAULT_LABEL}{k}" for k in range(len(names))]:
    return None
  return names


def preprocessor_config(image_size: Tuple[int, int]) -> Dict[str, Any]:
  """ViTImageProcessor: bilinear resize to the model's size, then (x / 255 - 0.5) / 0.5."""
  return {"image_processor_type": "ViTImageProcessor", "do_resize": True,
          "size": {"height": image_size[0], "width": image_size[1]}, "resample": 2,
          "do_rescale": True, "rescale_factor": 1 / 255, "do_normalize": True,
          "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5]}


def prefix_of(state) -> str:
  return "vit." if any(key.startswith("vit.") for key in state) else ""


def config_notes(cfg: Dict[str, Any]) -> List[str]:
  """Refusals (raised) and notes (returned) for an HF ViT config that is not ours."""
  if cfg.get("model_type", "vit") != "vit":
    raise Unsupported(f"model_type {cfg['model_type']!r} is not transformers' plain ViT "
                      "(model_type 'vit'), the one this converter maps")
  if not cfg.get("qkv_bias", True) or cfg.get("num_channels", 3) != 3:
    raise Unsupported("qkv_bias=False and num_channels != 3 have no vit_jax counterpart")
  found = []
  act = cfg.get("hidden_act", "gelu")
  if act not in TANH_GELUS:
    found.append(f"the model's hidden_act is {act!r}; vit_jax computes the tanh-approximate "
                 "GELU of the original ViT code (logits move by ~1e-4 relative; transformers' "
                 "conversions of the released ViTs say 'gelu' although those were trained "
                 "with the tanh one)")
  eps = cfg.get("layer_norm_eps", 1e-12)
  if eps != LAYER_NORM_EPS:
    found.append(f"the model's layer_norm_eps is {eps:g}; vit_jax's LayerNorms use 1e-6 "
                 "(a negligible change for trained weights)")
  if cfg.get("pooler_act", "tanh") != "tanh":
    raise Unsupported(f"pooler_act={cfg['pooler_act']!r}: vit_jax's pre_logits layer is tanh")
  return found


def recognises(state: Dict[str, Any], config: Dict[str, Any]) -> bool:
  """A Hugging Face ViT state dict (its patch-embedding projection)."""
  del config
  return any(".patch_embeddings.projection." in key
             or key.startswith("embeddings.patch_embeddings") for key in state)


def to_released(state: Dict[str, Any], config: Dict[str, Any], *, notes: bool) -> Dict[str, Any]:
  """A Hugging Face ViT state dict (with its config.json) in the released layout; notes:
  log what transformers computes differently (refuses what vit_jax does not compute)."""
  for note in config_notes(config):  # raises for models it does not map
    if notes:
      console.log.warning(note)
  width = state[prefix_of(state) +
                "embeddings.patch_embeddings.projection.weight"].shape[0]
  heads = config.get("num_attention_heads") or timm_layout.heads_for({}, None, width)
  try:
    flat = torch_layout.from_torch(state, rules(prefix_of(state)), heads, "Hugging Face")
  except torch_layout.LayoutMismatch as e:
    raise Unsupported(str(e)) from None
  config_consistency.check(config, flat, "hf")
  return flat
