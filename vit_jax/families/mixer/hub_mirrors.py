"""The MLP-Mixer family's released files on the Hugging Face Hub (the family contract's
HubMirrors part): timm's conversions of gs://mixer_models/imagenet21k, and which timm
mlp_mixer architectures vit_jax computes (the original's MlpMixer sizes)."""

from typing import Any, Dict, List, Optional

from vit_jax.checkpoints import hub_table
from vit_jax.families.mixer import names, timm_layout

# timm's conversions of gs://mixer_models/imagenet21k files (their tags record no url).
MIXER_TAGS = {"goog_in21k": "imagenet21k"}
MIXER_COPY = "timm's conversion of the bucket file (head kept; not compared array by array)"
SIZE_ARGS = {"patch_size", "num_blocks", "embed_dim"}  # what the original's Mixers set
# What a timm config's model_args may set of a computed Mixer.
computed_args = SIZE_ARGS | {"img_size", "num_classes", "mlp_ratio"}


# What hub refusals say the family takes of timm: its builders, and in words.
timm_models = "MlpMixer"
timm_scope = "the original's Mixers"


def owns_timm_architecture(architecture: str) -> bool:
  """timm's mlp_mixer module (its gMixer, ResMLP and gMLP too: refused by their arguments)."""
  return architecture.startswith(("mixer_", "gmixer_", "resmlp_", "gmlp_"))


def gelu_note(act_layer: Optional[str]) -> Optional[str]:
  """timm's MlpMixer computes the exact GELU (the original: tanh)."""
  del act_layer
  return timm_layout.GELU_NOTE


def transformers_notes(config: Dict[str, Any]) -> Optional[List[str]]:
  """transformers has no Mixer: no config of its is one."""
  del config
  return None


def rows(timm) -> Dict[str, List[Dict[str, str]]]:
  """{FAMILY/Mixer-X_P.npz: [timm row]} for timm's copies of Google's Mixers."""
  rows = {}
  for name in timm.models.list_pretrained("mixer_*"):
    architecture, tag = name.split(".")
    cfg = timm.models.get_pretrained_cfg(name)
    if tag not in MIXER_TAGS or not (cfg.hf_hub_id or "").startswith("timm/"):
      continue
    model = names.canonical(architecture.rsplit("_", 1)[0])
    rows.setdefault(f"{MIXER_TAGS[tag]}/{model}.npz", []).append(
        {"repo": cfg.hf_hub_id, "layout": hub_table.TIMM, "differs": MIXER_COPY})
  return rows


def timm_architectures(timm) -> Dict[str, Dict[str, Any]]:
  """{timm mlp_mixer architecture: {'act_layer', 'refused'}}: the original's MlpMixer
  sizes are computed; gMixer, ResMLP, gMLP blocks are refused, naming their arguments."""
  found = {}
  for name, kwargs in hub_table.builder_arguments(timm, "mlp_mixer", "_create_mixer"):
    other = sorted(set(kwargs) - SIZE_ARGS)
    found[name] = {"act_layer": None, "refused": ", ".join(
        f"{k}={hub_table.describe_value(kwargs[k])}" for k in other) or None}
  return found


