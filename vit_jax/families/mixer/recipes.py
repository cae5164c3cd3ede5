"""The MLP-Mixer's training recipes (configs/mixer_*.py): the original repository's
fine-tuning and the demo's small Mixer. Each takes the shared defaults from its config file
(vit_jax.training.config_defaults, on a floor above the families) and sets the Mixer's
keys."""

import ml_collections

from vit_jax.families.mixer import names

# The original's configs/mixer_base16_cifar10.py fine-tunes on CIFAR-10 ...
DATASET = "cifar10"
# ... at the released files' 224 px, whatever the dataset: the token-mixing MLPs fit one
# patch grid, and 448 px (2x per side) is the next size with a rule (docs/mixer.md).
CROP = names.RELEASED_SIDE


def finetune_config(defaults: ml_collections.ConfigDict,
                    model_name: str) -> ml_collections.ConfigDict:
  """Fine-tunes `model_name` from its ImageNet-21k file at CROP px; `defaults`: the shared
  SGD defaults at the dataset (config_defaults.finetune_defaults: its preset's splits and
  steps, else the HyperRule's)."""
  defaults.model_name = defaults.pretrained = model_name
  defaults.pp.crop = CROP
  return defaults


def demo_config(demo: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
  """configs/mixer_demo.py: configs/demo.py's run (`demo`: config_defaults.demo_config)
  with a 4-block Mixer of the same width in place of the ViT (4x4 patches; token-mixing
  width 32, channel-mixing 128)."""
  demo.model_name = "Mixer-S_16"
  for key in ("hidden_size", "mlp_dim", "num_heads", "num_layers"):
    del demo.model[key]
  demo.model.update(hidden_dim=64, num_blocks=4, tokens_mlp_dim=32, channels_mlp_dim=128)
  return demo
