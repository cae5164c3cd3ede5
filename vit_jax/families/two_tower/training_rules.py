"""The pair's training rules (the family contract's TrainingRules), for the contrastive
objective: each tower's encoder blocks for layer decay (block i of either tower decays as
block i: towers of one depth, as LiT's and SigLIP's, decay alike), the ViT's tensor splits
(the text transformer names its blocks as the ViT does), LoRA on both towers' attention."""

from vit_jax.families.vit import npz_layout as vit_npz_layout
from vit_jax.families.vit import training_rules as vit_training_rules
from vit_jax.models import family_contract

_ATTENTION = "MultiHeadDotProductAttention_1"


def tensor_widths(module):
  """Both towers' heads and MLP units split over the tensor axis."""
  img, txt = module.img, module.txt
  return ((img.num_heads, img.mlp_dim, txt.num_heads, txt.mlp_dim),
          f"the image tower's {img.num_heads} heads and {img.mlp_dim} MLP units and the text "
          f"tower's {txt.num_heads} heads and {txt.mlp_dim} MLP units")


RULES = family_contract.TrainingRules(
    blocks=r"(?:img/Transformer|txt/Encoder_0)/encoderblock",
    head_side=(r"^(img/(Transformer/encoder_norm|pre_logits|head|MAPHead_0)|"
               r"txt/(Encoder_0/encoder_norm|head)|t|b)(/|$)"),
    tensor_rules=vit_training_rules.RULES.tensor_rules,
    tensor_widths=tensor_widths,
    resized_on_load=rf"^img/{vit_npz_layout.POSEMB}$",
    to_block_layout=lambda params: params,
    depth_key=None,
    lora_targets=rf"{_ATTENTION}/(query|key|value|out)/kernel$")
