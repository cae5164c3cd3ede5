"""timm's MlpMixer (timm/models/mlp_mixer.py) <-> the released Mixer layout, by renaming
rules (vit_jax.checkpoints.torch_layout).

timm's Mixer computes ours except for the activation: its MLPs use the exact GELU by
default, the original code (and ours) the tanh approximation; timm's MlpMixer takes the
activation as a class (`act_layer`), not by name, so a timm folder cannot state it in its
config.json. Google's weights converted by timm (`mixer_b16_224.goog_in21k`, ...) were
trained with the tanh GELU: read with ours, they compute the original function.
"""

from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from vit_jax.base import console, errors
from vit_jax.checkpoints import torch_layout
from vit_jax.checkpoints.torch_layout import Flat, linear, norm, Rule
from vit_jax.families.mixer import model as mixer
from vit_jax.families.vit import timm_layout

BLOCK = "MixerBlock_{i}"
STEM_WEIGHT = "stem.proj.weight"  # a timm Mixer state dict has it (a timm ViT: patch_embed)
# How a timm user gets the original function: timm's MlpMixer takes the activation as a class.
TANH_GELU_ARGUMENT = "act_layer=functools.partial(torch.nn.GELU, approximate='tanh')"
# timm's registered Mixers by (width, patch, blocks): its builders fix these three sizes.
_REGISTERED = {(512, 32, 8): "mixer_s32_224", (512, 16, 8): "mixer_s16_224",
               (768, 32, 12): "mixer_b32_224", (768, 16, 12): "mixer_b16_224",
               (1024, 32, 24): "mixer_l32_224", (1024, 16, 24): "mixer_l16_224"}
GELU_NOTE = ("timm's MlpMixer computes the exact GELU (its default); vit_jax computes the "
             "tanh-approximate GELU of the original Mixer code, which Google's Mixers were "
             "trained with: for timm-trained weights the logits move slightly")


def rules() -> List[Rule]:
  """Every array of a Mixer, ours <-> timm's."""
  return [
      *linear("stem", "stem.proj", "conv"),
      *norm(f"{BLOCK}/LayerNorm_0", "blocks.{i}.norm1"),
      *linear(f"{BLOCK}/token_mixing/Dense_0", "blocks.{i}.mlp_tokens.fc1"),
      *linear(f"{BLOCK}/token_mixing/Dense_1", "blocks.{i}.mlp_tokens.fc2"),
      *norm(f"{BLOCK}/LayerNorm_1", "blocks.{i}.norm2"),
      *linear(f"{BLOCK}/channel_mixing/Dense_0", "blocks.{i}.mlp_channels.fc1"),
      *linear(f"{BLOCK}/channel_mixing/Dense_1", "blocks.{i}.mlp_channels.fc2"),
      *norm("pre_head_layer_norm", "norm"),
      *linear("head", "head"),
  ]


def to_timm(flat: Flat) -> Flat:
  """Released-layout Mixer arrays -> a timm MlpMixer state dict."""
  return torch_layout.to_torch(flat, rules(), "timm")


def model_name_and_args(module: mixer.MlpMixer, image_size: Tuple[int, int],
                        num_classes: Optional[int]) -> Tuple[str, Dict[str, Any]]:
  """(timm model name, create_model keyword arguments) of timm's MlpMixer with our sizes.
  timm's Mixer builders fix the width, patch and depth (Table 1's S, B and L at /32 and
  /16): another Mixer raises timm_layout.Unsupported. The MLP widths and image size are
  arguments (a Mixer resized for another resolution has wider token-mixing MLPs)."""
  name = _REGISTERED.get((module.hidden_dim, module.patch_size, module.num_blocks))
  if name is None:
    raise timm_layout.Unsupported(
        f"timm registers Mixers S, B and L at /32 and /16 only, not width "
        f"{module.hidden_dim}, patch {module.patch_size}, {module.num_blocks} blocks: "
        "convert it to an .npz instead")
  side = image_size[0] if image_size[0] == image_size[1] else list(image_size)
  ratios = [timm_layout.mlp_ratio(module.hidden_dim, width)
            for width in (module.tokens_mlp_dim, module.channels_mlp_dim)]
  return name, dict(img_size=side, mlp_ratio=ratios, num_classes=num_classes or 0)


def is_timm_mixer(state: Dict[str, Any]) -> bool:
  return STEM_WEIGHT in state


def from_timm(state: Flat) -> Flat:
  """A timm MlpMixer state dict -> released-layout arrays (LayoutMismatch for strays)."""
  return torch_layout.from_torch({k: np.asarray(v) for k, v in state.items()}, rules(), 1,
                                 "timm MlpMixer")


def recognises(state: Dict[str, Any], config: Dict[str, Any]) -> bool:
  del config
  return is_timm_mixer(state)


def to_released(state: Flat, config: Dict[str, Any], *, notes: bool) -> Flat:
  """A timm MlpMixer state dict in the released layout; notes: log timm's exact GELU."""
  del config
  try:
    flat = from_timm(state)
  except torch_layout.LayoutMismatch as e:
    raise errors.InvalidInput(str(e)) from None
  if notes:
    console.log.warning(GELU_NOTE)
  return flat
