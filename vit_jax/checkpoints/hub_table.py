"""Builds hub_mirrors.json, the table of Hugging Face Hub copies of gs://vit_models files.

  python -m vit_jax.checkpoints.hub_table   # needs timm (the interop extra); rewrites the file

(Where timm's import fails because torchvision's wheel was built for another torch, the
interop tests' declare_missing_torchvision_ops shows the workaround.)

Rows come from timm's own pretrained configs (`get_pretrained_cfg(NAME).url` names the
bucket file a `timm/NAME` repository was converted from; the paper's ImageNet-21k files
are the `orig_in21k` tags, which record no url) and from Google's `google/vit-*`
repositories (transformers' conversions of the paper's files, listed below by hand: no
library records them). The test in tests/checkpoints/test_hub_table.py rebuilds the table
with the installed timm and compares. The table also holds, per timm VisionTransformer
architecture, what its builder sets beyond sizes: hub.py refuses a `hf-hub:timm/...` model
whose architecture computes something vit_jax does not.
"""

import json
import os
import re
from typing import Any, Dict, List

from vit_jax.base import storage
from vit_jax.families.vit import names as zoo

TABLE = os.path.join(os.path.dirname(__file__), "hub_mirrors.json")
BUCKET_HTTPS = "https://storage.googleapis.com/vit_models/"
TIMM, HF = "timm", "hf"

SAME = "the same arrays"
NO_HEAD_NO_PRE_LOGITS = "no head, no pre_logits"  # timm dropped both from the 21k files
POOLER = "no head; pre_logits kept"  # as transformers' pooler
# What those differences mean, for listings and errors.
LEGEND = ("no head: the 21,843-class ImageNet-21k head is missing (fine-tuning replaces "
          "it anyway); no pre_logits: the representation layer is missing too, which "
          "--pre_logits and 21k-feature uses need (the google/ copy keeps it)")

# Google's transformers-layout repositories of the paper's files: repo -> (family, file).
GOOGLE = {
    "google/vit-base-patch16-224-in21k": ("imagenet21k", "ViT-B_16"),
    "google/vit-base-patch32-224-in21k": ("imagenet21k", "ViT-B_32"),
    "google/vit-large-patch16-224-in21k": ("imagenet21k", "ViT-L_16"),
    "google/vit-large-patch32-224-in21k": ("imagenet21k", "ViT-L_32"),
    "google/vit-huge-patch14-224-in21k": ("imagenet21k", "ViT-H_14"),
    "google/vit-base-patch16-224": ("imagenet21k+imagenet2012", "ViT-B_16-224"),
    "google/vit-base-patch16-384": ("imagenet21k+imagenet2012", "ViT-B_16"),
    "google/vit-base-patch32-384": ("imagenet21k+imagenet2012", "ViT-B_32"),
    "google/vit-large-patch16-224": ("imagenet21k+imagenet2012", "ViT-L_16-224"),
    "google/vit-large-patch16-384": ("imagenet21k+imagenet2012", "ViT-L_16"),
    "google/vit-large-patch32-384": ("imagenet21k+imagenet2012", "ViT-L_32"),
}
_SIZES = {"tiny": "Ti", "small": "S", "base": "B", "large": "L", "huge": "H"}
_HYBRIDS = {"vit_base_r50_s16": "R50+ViT-B_16", "vit_large_r50_s32": "R50+ViT-L_32",
            "vit_small_r26_s32": "R26+ViT-S_32", "vit_tiny_r_s16_p8": "R+ViT-Ti_16"}
# Builder arguments vit_jax computes (with what timm_layout and formats already check);
# any other argument a builder sets makes the architecture refused, naming it.
COMPUTED_ARGS = {"img_size", "patch_size", "embed_dim", "depth", "num_heads", "mlp_ratio",
                 "num_classes", "global_pool", "class_token", "fc_norm", "no_embed_class",
                 "dynamic_img_size", "act_layer", "qkv_bias"}
ACTIVATIONS = (None, "gelu", "gelu_tanh")  # None and 'gelu': the exact GELU (a warning)


def released_model(architecture: str) -> str:
  """timm's `vit_base_patch16_224` -> `ViT-B_16`, `vit_base_r50_s16_384` -> `R50+ViT-B_16`."""
  base = architecture.rsplit("_", 1)[0]
  if base in _HYBRIDS:
    return _HYBRIDS[base]
  match = re.fullmatch(r"vit_(tiny|small|base|large|huge)_patch(\d+)", base)
  if not match:
    raise ValueError(f"timm architecture {architecture} is no released model")
  return zoo.canonical_name(f"ViT-{_SIZES[match[1]]}_{match[2]}")


def _paper_file(name: str) -> str:
  """The bucket file of a timm `orig_in21k[_ft_in1k]` tag (those record no bucket url)."""
  architecture, tag = name.split(".")
  model = released_model(architecture)
  if tag == "orig_in21k":
    return f"imagenet21k/{model}.npz"
  suffix = "-224" if architecture.endswith("_224") else ""  # the 384 px files have none
  return f"imagenet21k+imagenet2012/{model}{suffix}.npz"


def timm_rows(timm) -> Dict[str, List[Dict[str, str]]]:
  """{FAMILY/FILE.npz: [timm row]} from timm's pretrained configs."""
  rows = {}
  for name in timm.models.list_pretrained("vit_*"):
    cfg = timm.models.get_pretrained_cfg(name)
    if not cfg.hf_hub_id or not cfg.hf_hub_id.startswith("timm/"):
      continue
    url, tag = cfg.url or "", name.split(".")[1]
    if url.startswith(BUCKET_HTTPS):
      path, differs = url[len(BUCKET_HTTPS):], SAME
    elif tag in ("orig_in21k", "orig_in21k_ft_in1k"):
      path = _paper_file(name)
      differs = NO_HEAD_NO_PRE_LOGITS if tag == "orig_in21k" else SAME
    else:
      continue
    rows.setdefault(path, []).append({"repo": cfg.hf_hub_id, "layout": TIMM,
                                      "differs": differs})
  return rows


# timm's conversions of gs://mixer_models/imagenet21k files (their tags record no url).
MIXER_TAGS = {"goog_in21k": "imagenet21k"}
MIXER_COPY = "timm's conversion of the bucket file (head kept; not compared array by array)"
MIXER_ARGS = {"patch_size", "num_blocks", "embed_dim"}  # what the original's Mixers set


def mixer_rows(timm) -> Dict[str, List[Dict[str, str]]]:
  """{FAMILY/Mixer-X_P.npz: [timm row]} for timm's copies of Google's Mixers."""
  rows = {}
  for name in timm.models.list_pretrained("mixer_*"):
    architecture, tag = name.split(".")
    cfg = timm.models.get_pretrained_cfg(name)
    if tag not in MIXER_TAGS or not (cfg.hf_hub_id or "").startswith("timm/"):
      continue
    model = zoo.canonical_name(architecture.rsplit("_", 1)[0])
    rows.setdefault(f"{MIXER_TAGS[tag]}/{model}.npz", []).append(
        {"repo": cfg.hf_hub_id, "layout": TIMM, "differs": MIXER_COPY})
  return rows


def _builder_arguments(timm, module_name: str, factory: str):
  """(model name, the keyword arguments its builder passes to `factory`) for each model of
  timm.models.<module_name>, captured by standing in for the factory: no model is built."""
  module = getattr(timm.models, module_name)

  class Captured(Exception):
    pass

  def capture(variant, pretrained=False, **kwargs):
    raise Captured(kwargs)

  original = getattr(module, factory)
  setattr(module, factory, capture)
  try:
    for name in timm.models.list_models(module=module_name):
      try:
        getattr(module, name)(pretrained=False)
      except Captured as e:
        yield name, e.args[0]
  finally:
    setattr(module, factory, original)


def mixer_architectures(timm) -> Dict[str, Dict[str, Any]]:
  """{timm mlp_mixer architecture: {'act_layer', 'refused'}}: the original's MlpMixer
  sizes are computed; gMixer, ResMLP, gMLP blocks are refused, naming their arguments."""
  found = {}
  for name, kwargs in _builder_arguments(timm, "mlp_mixer", "_create_mixer"):
    other = sorted(set(kwargs) - MIXER_ARGS)
    found[name] = {"act_layer": None, "refused": ", ".join(
        f"{k}={_describe(kwargs[k])}" for k in other) or None}
  return found


def google_rows() -> Dict[str, List[Dict[str, str]]]:
  return {f"{family}/{file}.npz": [{"repo": repo, "layout": HF,
                                    "differs": POOLER if family == "imagenet21k" else SAME}]
          for repo, (family, file) in GOOGLE.items()}


def mirrors(timm) -> Dict[str, List[Dict[str, str]]]:
  """Every mirrored bucket file and its copies in the order resolution tries them: for the
  ImageNet-21k files Google's (pre_logits kept) first, else timm's (safetensors, always)."""
  table = {**timm_rows(timm), **mixer_rows(timm)}
  for path, rows in google_rows().items():
    table[path] = rows + table.get(path, []) if path.startswith("imagenet21k/") else (
        table.get(path, []) + rows)
  return dict(sorted(table.items()))


def _describe(value: Any) -> Any:
  """A builder argument as JSON: classes and functions by name, partials with arguments."""
  if isinstance(value, (str, int, float, bool, type(None))):
    return value
  if isinstance(value, (tuple, list)):
    return [_describe(v) for v in value]
  func = getattr(value, "func", None)
  if func is not None:  # functools.partial
    args = ", ".join(f"{k}={v!r}" for k, v in value.keywords.items())
    return f"{getattr(func, '__name__', func)}({args})"
  return getattr(value, "__name__", repr(value))


def architectures(timm) -> Dict[str, Dict[str, Any]]:
  """{timm architecture: {'act_layer': ..., 'refused': reason or None}} for its plain
  VisionTransformer builders (their arguments, captured without building a model) and the
  ResNetV2 hybrids timm_layout maps."""
  found = {}
  for name, kwargs in _builder_arguments(timm, "vision_transformer",
                                         "_create_vision_transformer"):
    other = sorted(k for k, v in kwargs.items()
                   if k not in COMPUTED_ARGS or (k == "qkv_bias" and v is not True))
    act = _describe(kwargs.get("act_layer"))
    reasons = [f"{k}={_describe(kwargs[k])}" for k in other]
    if act not in ACTIVATIONS:
      reasons.insert(0, f"act_layer={act}")
    found[name] = {"act_layer": act, "refused": ", ".join(reasons) or None}
  for name in timm.models.list_models(module="vision_transformer_hybrid"):
    known = name.rsplit("_", 1)[0] in _HYBRIDS or name == "vit_base_r26_s32_224"
    found[name] = {"act_layer": None, "refused": None if known else
                   "a ResNet stem vit_jax does not build (it builds the paper's ResNetV2 "
                   "stems: R+Ti/16, R26, R50)"}
  return dict(sorted(found.items()))


def build(timm) -> Dict[str, Any]:
  return {"timm_version": timm.__version__, "mirrors": mirrors(timm),
          "timm_architectures": dict(sorted({**architectures(timm),
                                             **mixer_architectures(timm)}.items()))}


def load() -> Dict[str, Any]:
  return json.loads(storage.read_text(TABLE))


def write(table: Dict[str, Any], path: str = TABLE) -> None:
  storage.write_atomic(path, json.dumps(table, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
  import timm as _timm  # pylint: disable=import-outside-toplevel
  write(build(_timm))
  print(TABLE)
