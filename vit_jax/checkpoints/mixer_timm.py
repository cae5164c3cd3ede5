"""timm's MlpMixer (timm/models/mlp_mixer.py) <-> the released Mixer layout, by renaming
rules (vit_jax.checkpoints.torch_layout).

timm's Mixer computes ours except for the activation: its MLPs use the exact GELU by
default, the original code (and ours) the tanh approximation; timm's MlpMixer takes the
activation as a class (`act_layer`), not by name, so a timm folder cannot state it in its
config.json. Google's weights converted by timm (`mixer_b16_224.goog_in21k`, ...) were
trained with the tanh GELU: read with ours, they compute the original function.
"""

from typing import Any, Dict, List

import numpy as np

from vit_jax.checkpoints import torch_layout
from vit_jax.checkpoints.torch_layout import Flat, linear, norm, Rule

BLOCK = "MixerBlock_{i}"
STEM_WEIGHT = "stem.proj.weight"  # a timm Mixer state dict has it (a timm ViT: patch_embed)
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


def is_timm_mixer(state: Dict[str, Any]) -> bool:
  return STEM_WEIGHT in state


def from_timm(state: Flat) -> Flat:
  """A timm MlpMixer state dict -> released-layout arrays (LayoutMismatch for strays)."""
  return torch_layout.from_torch({k: np.asarray(v) for k, v in state.items()}, rules(), 1,
                                 "timm MlpMixer")
