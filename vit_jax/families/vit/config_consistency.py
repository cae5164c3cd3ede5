"""A timm / Hugging Face config.json checked against the weights it comes with.

The weights decide the shapes, so a config that contradicts them (another hidden size,
layer count, patch or image size, MLP width, class count, or an architecture that needs a
head the weights lack) means the folder was assembled wrongly: the model a user thinks
they load is not the one they get. Such a folder is refused, naming both values. What
weights cannot show (the head count) stays the config's.
"""

import math
import re
from typing import Any, Dict, List, Optional, Tuple

from vit_jax.base import errors
from vit_jax.families.vit import npz_layout

Flat = Dict[str, Any]
# timm's size names and what they mean (width, depth): the defaults a name implies.
_TIMM_SIZES = {"tiny": (192, 12), "small": (384, 12), "base": (768, 12), "large": (1024, 24),
               "huge": (1280, 32)}
_TIMM_NAME = re.compile(r"^vit_([a-z]+)_patch(\d+)(?:_[a-z0-9]+)*?_(\d+)(?:\.|$)")


class ConfigMismatch(errors.InvalidInput):
  """A config.json that contradicts its weights; one line naming both values."""


def _weights_say(flat: Flat) -> Dict[str, Optional[int]]:
  arch, classes, _ = npz_layout.infer_architecture(flat)
  image = None
  posemb = flat.get(npz_layout.POSEMB)
  if posemb is not None and arch.resnet_stages is None:
    tokens = posemb.shape[1] - (arch.classifier == "token")
    side = math.isqrt(tokens)
    image = side * arch.patch_size if side * side == tokens else None
  return {"hidden": arch.hidden_size, "layers": arch.num_layers, "mlp": arch.mlp_dim,
          "patch": None if arch.resnet_stages is not None else arch.patch_size,
          "image": image, "classes": classes}


def _hf_says(config: Dict[str, Any]) -> List[Tuple[str, str, Any]]:
  """(what, config key, value) the config states."""
  said = [(what, key, config[key]) for what, key in (
      ("hidden", "hidden_size"), ("layers", "num_hidden_layers"), ("patch", "patch_size"),
      ("image", "image_size"), ("mlp", "intermediate_size")) if key in config]
  architecture = (config.get("architectures") or [None])[0]
  if architecture == "ViTForImageClassification":
    labels = config.get("id2label")
    said.append(("classes", "architectures ViTForImageClassification with num_labels",
                 len(labels) if isinstance(labels, dict) and labels else
                 config.get("num_labels", 2)))
  return said


def _timm_says(config: Dict[str, Any]) -> List[Tuple[str, str, Any]]:
  said = []
  match = _TIMM_NAME.match(str(config.get("architecture", "")))
  if match and match.group(1) in _TIMM_SIZES:
    name = f"architecture {config['architecture']}"
    width, depth = _TIMM_SIZES[match.group(1)]
    said += [("hidden", name, width), ("layers", name, depth),
             ("patch", name, int(match.group(2))), ("image", name, int(match.group(3)))]
  args = config.get("model_args", {})
  for what, key in (("hidden", "embed_dim"), ("layers", "depth"), ("patch", "patch_size"),
                    ("image", "img_size")):
    if key in args:  # create_model's arguments override the name's defaults
      said = [s for s in said if s[0] != what] + [(what, f"model_args.{key}", args[key])]
  if "mlp_ratio" in args:
    width = dict((s[0], s[2]) for s in said).get("hidden")
    if width:
      said.append(("mlp", "model_args.mlp_ratio", int(width * float(args["mlp_ratio"]))))
  if "num_classes" in config:
    said.append(("classes", "num_classes", config["num_classes"] or None))
  return said


def check(config: Dict[str, Any], flat: Flat, kind: str) -> None:
  """Raises ConfigMismatch where `config` (kind 'hf' or 'timm') contradicts `flat`."""
  if not config:
    return
  try:
    weights = _weights_say(flat)
  except (KeyError, npz_layout.LayoutError):
    return  # not a ViT: read_checkpoint names what the file holds
  said = _hf_says(config) if kind == "hf" else _timm_says(config)
  wrong = []
  for what, key, value in said:
    if isinstance(value, (list, tuple)):  # image_size / img_size as (h, w)
      value = value[0] if len(set(value)) == 1 else value
    if (weights[what] is not None or what == "classes") and value != weights[what]:
      wrong.append(f"{key} {value} but the weights have {weights[what]}"
                   if what != "classes" or weights[what] else
                   f"{key} {value} but the weights have no head")
  if wrong:
    raise ConfigMismatch(f"its config.json contradicts its weights: {'; '.join(wrong)}: fix "
                         "config.json (or use the weights it describes)")
