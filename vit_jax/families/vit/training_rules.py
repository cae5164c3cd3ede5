"""The ViT's training rules (the family contract's TrainingRules): its encoder blocks for
layer decay, the Megatron-style tensor splits of attention heads and MLP units, and the
position table that loading resizes. NaFlex's ViT and the masked-patch predictor name
their parameters as the ViT does, so the same rules serve them."""

from vit_jax.families.vit import masked_patch_model, npz_layout
from vit_jax.models import encoder_blocks, family_contract

_ATTENTION, _MLP = "MultiHeadDotProductAttention_1", "MlpBlock_3"


def tensor_widths(module):
  """Each device holds whole heads and a slice of the MLP's hidden units."""
  return ((module.num_heads, module.mlp_dim),
          f"the model's {module.num_heads} heads and {module.mlp_dim} MLP units")


RULES = family_contract.TrainingRules(
    blocks=f"Transformer/{encoder_blocks.SCANNED_BLOCKS}",
    head_side=(r"^(Transformer/encoder_norm|pre_logits|head|MAPHead_0|"
               rf"{masked_patch_model.PREDICTION_HEAD})(/|$)"),
    tensor_rules=(
        (rf"{_ATTENTION}/(query|key|value)/kernel$", (None, "tensor", None)),
        (rf"{_ATTENTION}/(query|key|value)/bias$", ("tensor", None)),
        (rf"{_ATTENTION}/out/kernel$", ("tensor", None, None)),
        (rf"{_MLP}/Dense_0/kernel$", (None, "tensor")),
        (rf"{_MLP}/Dense_0/bias$", ("tensor",)),
        (rf"{_MLP}/Dense_1/kernel$", ("tensor", None)),
        (rf"{_ATTENTION}/(query|key|value)/lora_b$", (None, "tensor", None)),
        (rf"{_ATTENTION}/out/lora_a$", ("tensor", None, None)),
        (rf"{_MLP}/Dense_0/lora_b$", (None, "tensor")),
        (rf"{_MLP}/Dense_1/lora_a$", ("tensor", None)),
    ),
    tensor_widths=tensor_widths,
    resized_on_load=rf"^{npz_layout.POSEMB}$",
    to_block_layout=encoder_blocks.to_block_layout,
    depth_key="num_layers",
    lora_targets=rf"{_ATTENTION}/(query|key|value|out)/kernel$")
