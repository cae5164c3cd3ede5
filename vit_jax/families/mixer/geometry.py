"""How an MLP-Mixer cuts images into tokens (the family contract's Geometry part): its
stem's SAME-padded patches, and the matmul FLOPs of its two MLPs per block."""

from typing import Optional

from vit_jax.families.mixer import model

# The token-mixing MLPs take one grid: another size is resized on loading (load_npz).
resizes_in_forward = False


def stride(module: model.MlpMixer) -> int:
  return module.patch_size


def token_grid(module: model.MlpMixer, image_side: int) -> int:
  return model.token_grid(module, image_side)


def flops_per_image(module: model.MlpMixer, image_side: int,
                    patches: Optional[int] = None) -> float:
  """Matmul FLOPs (2 per multiply-add) of one Mixer forward pass: per block the token-mixing
  MLP (patches x tokens_mlp_dim, both ways, per channel) and the channel-mixing MLP."""
  patches = patches or model.token_grid(module, image_side) ** 2
  c = module.hidden_dim
  per_block = 4 * c * patches * module.tokens_mlp_dim + 4 * patches * c * module.channels_mlp_dim
  embedding = 2 * patches * module.patch_size**2 * 3 * c
  return embedding + module.num_blocks * per_block + 2 * c * module.num_classes
