"""The ViT family's released files on the Hugging Face Hub (the family contract's
HubMirrors part): timm's conversions (their pretrained configs name the bucket file, or the
paper's `orig_in21k` tags), Google's transformers-layout `google/vit-*` repositories, and
which timm VisionTransformer architectures vit_jax computes exactly."""

import re
from typing import Any, Dict, List, Optional

from vit_jax.checkpoints import hub_table
from vit_jax.families.vit import hf_layout, names, timm_layout

BUCKET_HTTPS = "https://storage.googleapis.com/vit_models/"

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
computed_args = {"img_size", "patch_size", "embed_dim", "depth", "num_heads", "mlp_ratio",
                 "num_classes", "global_pool", "class_token", "fc_norm", "no_embed_class",
                 "dynamic_img_size", "act_layer", "qkv_bias"}


# What hub refusals say the family takes of timm: its builders, and in words.
timm_models = "VisionTransformer"
timm_scope = "plain ViTs, their R26/R50 hybrids"


def owns_timm_architecture(architecture: str) -> bool:
  """timm's vision_transformer and vision_transformer_hybrid models."""
  return architecture.startswith("vit_")


def gelu_note(act_layer: Optional[str]) -> Optional[str]:
  return timm_layout.gelu_note(act_layer)


def transformers_notes(config: Dict[str, Any]) -> Optional[List[str]]:
  """hf_layout's refusals and notes: transformers' plain ViT (model_type 'vit') is the one
  transformers model the default family reads, and it names any other model_type."""
  return hf_layout.config_notes(config)


def released_model(architecture: str) -> str:
  """timm's `vit_base_patch16_224` -> `ViT-B_16`, `vit_base_r50_s16_384` -> `R50+ViT-B_16`."""
  base = architecture.rsplit("_", 1)[0]
  if base in _HYBRIDS:
    return _HYBRIDS[base]
  match = re.fullmatch(r"vit_(tiny|small|base|large|huge)_patch(\d+)", base)
  if not match:
    raise ValueError(f"timm architecture {architecture} is no released model")
  return names.canonical(f"ViT-{_SIZES[match[1]]}_{match[2]}")


def _paper_file(name: str) -> str:
  """The bucket file of a timm `orig_in21k[_ft_in1k]` tag (those record no bucket url)."""
  architecture, tag = name.split(".")
  model = released_model(architecture)
  if tag == "orig_in21k":
    return f"imagenet21k/{model}.npz"
  suffix = "-224" if architecture.endswith("_224") else ""  # the 384 px files have none
  return f"imagenet21k+imagenet2012/{model}{suffix}.npz"


def _timm_rows(timm) -> Dict[str, List[Dict[str, str]]]:
  """{FAMILY/FILE.npz: [timm row]} from timm's pretrained configs."""
  rows = {}
  for name in timm.models.list_pretrained("vit_*"):
    cfg = timm.models.get_pretrained_cfg(name)
    if not cfg.hf_hub_id or not cfg.hf_hub_id.startswith("timm/"):
      continue
    url, tag = cfg.url or "", name.split(".")[1]
    if url.startswith(BUCKET_HTTPS):
      path, differs = url[len(BUCKET_HTTPS):], hub_table.SAME
    elif tag in ("orig_in21k", "orig_in21k_ft_in1k"):
      path = _paper_file(name)
      differs = hub_table.NO_HEAD_NO_PRE_LOGITS if tag == "orig_in21k" else hub_table.SAME
    else:
      continue
    rows.setdefault(path, []).append({"repo": cfg.hf_hub_id, "layout": hub_table.TIMM,
                                      "differs": differs})
  return rows


def _google_rows() -> Dict[str, List[Dict[str, str]]]:
  return {f"{family}/{file}.npz": [{"repo": repo, "layout": hub_table.HF,
                                    "differs": (hub_table.POOLER if family == "imagenet21k"
                                                else hub_table.SAME)}]
          for repo, (family, file) in GOOGLE.items()}


def timm_architectures(timm) -> Dict[str, Dict[str, Any]]:
  """{timm architecture: {'act_layer': ..., 'refused': reason or None}} for its plain
  VisionTransformer builders (their arguments, captured without building a model) and the
  ResNetV2 hybrids timm_layout maps."""
  found = {}
  for name, kwargs in hub_table.builder_arguments(timm, "vision_transformer",
                                                  "_create_vision_transformer"):
    other = sorted(k for k, v in kwargs.items()
                   if k not in computed_args or (k == "qkv_bias" and v is not True))
    act = hub_table.describe_value(kwargs.get("act_layer"))
    reasons = [f"{k}={hub_table.describe_value(kwargs[k])}" for k in other]
    if act not in hub_table.ACTIVATIONS:
      reasons.insert(0, f"act_layer={act}")
    found[name] = {"act_layer": act, "refused": ", ".join(reasons) or None}
  for name in timm.models.list_models(module="vision_transformer_hybrid"):
    known = name.rsplit("_", 1)[0] in _HYBRIDS or name == "vit_base_r26_s32_224"
    found[name] = {"act_layer": None, "refused": None if known else
                   "a ResNet stem vit_jax does not build (it builds the paper's ResNetV2 "
                   "stems: R+Ti/16, R26, R50)"}
  return dict(sorted(found.items()))


def rows(timm) -> Dict[str, List[Dict[str, str]]]:
  """Every mirrored bucket file and its copies in the order resolution tries them: for the
  ImageNet-21k files Google's (pre_logits kept) first, else timm's (safetensors, always)."""
  table = _timm_rows(timm)
  for path, rows in _google_rows().items():
    table[path] = rows + table.get(path, []) if path.startswith("imagenet21k/") else (
        table.get(path, []) + rows)
  return dict(sorted(table.items()))


