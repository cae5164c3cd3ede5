"""How a ViT cuts images into tokens (the family contract's Geometry part): patches, a
hybrid's ResNet stem, and the matmul FLOPs that follow."""

from typing import Optional

from vit_jax.families.vit import hybrid_stem

resizes_in_forward = True  # the position table is resized in the forward pass


def stride(module) -> int:
  """Pixels per token side: the patch size, times the ResNet stem's stride for hybrids."""
  stride_px = module.patch_size
  if getattr(module, "resnet_stages", None) is not None:
    stride_px *= hybrid_stem.stem_stride(module.resnet_stages)
  return stride_px


def token_grid(module, image_side: int) -> int:
  """Tokens per side for an input side: SAME stem convs round up, VALID patches down."""
  if getattr(module, "resnet_stages", None) is not None:
    halvings = hybrid_stem.stem_stride(module.resnet_stages).bit_length() - 1
    for _ in range(halvings):
      image_side = -(-image_side // 2)
  return image_side // module.patch_size


def flops_per_image(module, image_side: int, patches: Optional[int] = None
                    ) -> Optional[float]:
  """Matmul FLOPs (2 per multiply-add) of one plain-ViT forward pass; None for hybrids.
  patches: a NaFlexViT's budget (config.pp.max_patches; its padding is computed too)
  instead of image_side's grid."""
  if getattr(module, "resnet_stages", None) is not None:
    return None
  patches = patches or (image_side // module.patch_size) ** 2
  tokens = patches + (getattr(module, "classifier", "map") == "token")
  d, m = module.hidden_size, module.mlp_dim
  per_layer = 2 * tokens * (4 * d * d + 2 * d * m) + 4 * tokens * tokens * d
  embedding = 2 * patches * module.patch_size**2 * 3 * d
  head = 2 * (getattr(module, "representation_size", None) or d) * module.num_classes
  return embedding + module.num_layers * per_layer + head
