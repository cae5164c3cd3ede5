"""The MLP-Mixer's training rules (the family contract's TrainingRules): its Mixer blocks
for layer decay (the stem is its embedding), both MLPs split over `tensor` like the ViT's
MLP, and the token-mixing MLPs that loading resizes at another resolution
(vit_jax.families.mixer.resize)."""

from vit_jax.families.mixer import model
from vit_jax.models import family_contract


def tensor_widths(module: model.MlpMixer):
  """Each device holds a slice of both MLPs' hidden units."""
  widths = (module.tokens_mlp_dim, module.channels_mlp_dim)
  return widths, ("the Mixer's token- and channel-mixing MLP widths "
                  f"{widths[0]} and {widths[1]}")


RULES = family_contract.TrainingRules(
    blocks=model.SCANNED_BLOCKS,
    head_side=r"^(pre_head_layer_norm|head)(/|$)",
    tensor_rules=(
        (r"_mixing/Dense_0/(kernel|lora_b)$", (None, "tensor")),
        (r"_mixing/Dense_0/bias$", ("tensor",)),
        (r"_mixing/Dense_1/(kernel|lora_a)$", ("tensor", None)),
    ),
    tensor_widths=tensor_widths,
    resized_on_load=rf"^{model.SCANNED_BLOCKS}_\d+/token_mixing/Dense_[01]/(kernel|bias)$",
    to_block_layout=model.to_block_layout,
    depth_key="num_blocks",
    lora_targets=r"_mixing/Dense_[01]/kernel$")
