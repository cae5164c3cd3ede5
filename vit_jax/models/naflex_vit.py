"""SigLIP 2's NaFlex image tower (Tschannen et al. 2025): each image is cut at its own
aspect ratio into a variable number of patches, padded to a fixed budget; the padding is
masked out of self-attention and of the MAP pooling, and the learned position table
(a square grid, 16 x 16 in the released files) is resized to each image's patch grid with
an antialiased bilinear filter.

The parameters are a MAP-pooled VisionTransformer's, name for name (`embedding` as the
patch kernel (P, P, C, D), `Transformer/...`, `MAPHead_0`, `head`): a file load_npz reads
for a fixed-size model runs here too. Inputs are what vit_jax.data's NaFlex patchifier and
transformers' Siglip2ImageProcessor give: patches [B, N, P*P*C] flattened (row, column,
channel), a mask [B, N] of the real patches, and each image's grid (rows, columns) [B, 2].
"""

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from vit_jax.base import errors
from vit_jax.models import attention, encoder_blocks, vit


def triangle_weights(out_size, in_size: int, max_out: int):
  """[max_out, in_size] weights of an antialiased linear resize from in_size to out_size
  (a traced scalar) samples, as PyTorch's interpolate(mode='bilinear', antialias=True,
  align_corners=False) and PIL compute them: half-pixel centres, the triangle widened by
  the downscale factor, each row normalised; rows at or past out_size are junk (padding)."""
  scale = in_size / jnp.maximum(out_size, 1).astype(jnp.float32)
  support = jnp.maximum(scale, 1.0)
  centre = (jnp.arange(max_out, dtype=jnp.float32)[:, None] + 0.5) * scale
  offset = jnp.arange(in_size, dtype=jnp.float32)[None, :] + 0.5 - centre
  weights = jnp.maximum(0.0, 1.0 - jnp.abs(offset) / support)
  return weights / jnp.maximum(jnp.sum(weights, axis=1, keepdims=True), 1e-12)


def resize_posemb_per_image(table, shapes, num_patches: int):
  """table (1, g*g, D) -> [B, num_patches, D]: image b's rows*cols first, resized to its
  grid shapes[b] and flattened row-major (the rest: padding, masked out)."""
  grid = int(round(table.shape[1] ** 0.5))
  table = table.reshape(grid, grid, -1).astype(jnp.float32)
  index = jnp.arange(num_patches)

  def one(shape):
    rows, cols = shape[0], shape[1]
    row_w = triangle_weights(rows, grid, num_patches)[index // jnp.maximum(cols, 1)]
    col_w = triangle_weights(cols, grid, num_patches)[index % jnp.maximum(cols, 1)]
    return jnp.einsum("na,nb,abd->nd", row_w, col_w, table)

  return jax.vmap(one)(jnp.asarray(shapes))


class NaFlexViT(nn.Module):
  """A MAP-pooled ViT on NaFlex inputs; see the module docstring. num_classes 0: the
  pooled representation [B, D]; else a `head` on it."""
  num_classes: int
  patch_size: int
  hidden_size: int
  mlp_dim: int
  num_heads: int
  num_layers: int
  posemb_grid: int = 16  # the position table's side (released: 16 x 16)
  dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, patches, mask, shapes, *, train: bool = False):
    del train  # no dropout: a NaFlex fine-tune is not this module's job yet
    x = PatchLinear(self.patch_size, self.hidden_size, self.dtype, name="embedding")(patches)
    mask = mask.astype(bool)
    x = Tokens(self.num_layers, self.mlp_dim, self.num_heads, self.posemb_grid, self.dtype,
               name="Transformer")(x, mask, shapes)
    x = vit.MAPHead(self.mlp_dim, self.num_heads, self.dtype, name="MAPHead_0")(x, mask)
    if not self.num_classes:
      return x
    return nn.Dense(self.num_classes, name="head", dtype=self.dtype,
                    kernel_init=nn.initializers.zeros)(x)


class PatchLinear(nn.Module):
  """The `embedding` conv's kernel (P, P, C, D) and bias applied to flattened patches."""
  patch_size: int
  width: int
  dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, patches):
    channels = patches.shape[-1] // (self.patch_size * self.patch_size)
    kernel = self.param("kernel", nn.initializers.lecun_normal(),
                        (self.patch_size, self.patch_size, channels, self.width))
    bias = self.param("bias", nn.initializers.zeros, (self.width,))
    flat = kernel.reshape(-1, self.width).astype(self.dtype)
    return patches.astype(self.dtype) @ flat + bias.astype(self.dtype)


class Tokens(nn.Module):
  """`Transformer`: position embedding resized per image, masked blocks, final norm."""
  num_layers: int
  mlp_dim: int
  num_heads: int
  posemb_grid: int = 16
  dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, x, mask, shapes):
    table = PosembTable(self.posemb_grid, name="posembed_input")(x.shape[-1])
    x = x + resize_posemb_per_image(table, shapes, x.shape[1]).astype(x.dtype)
    for i in range(self.num_layers):
      x = MaskedBlock(self.mlp_dim, self.num_heads, self.dtype, name=f"encoderblock_{i}")(
          x, mask)
    return encoder_blocks.layer_norm("encoder_norm", self.dtype)(x)


class PosembTable(nn.Module):
  """The learned grid x grid table (`pos_embedding`, (1, grid * grid, D))."""
  grid: int = 16

  @nn.compact
  def __call__(self, width: int):
    return self.param("pos_embedding", nn.initializers.normal(stddev=0.02),
                      (1, self.grid * self.grid, width))


class MaskedBlock(nn.Module):
  """encoder_blocks.Encoder1DBlock's parameters, its attention blind to the padding."""
  mlp_dim: int
  num_heads: int
  dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, inputs, mask):
    x = encoder_blocks.layer_norm("LayerNorm_0", self.dtype)(inputs)
    x = attention.SelfAttention(self.num_heads, dtype=self.dtype,
                                    name="MultiHeadDotProductAttention_1")(
                                        x, deterministic=True, mask=mask)
    x = x + inputs
    y = encoder_blocks.layer_norm("LayerNorm_2", self.dtype)(x)
    return x + encoder_blocks.MlpBlock(self.mlp_dim, dtype=self.dtype, name="MlpBlock_3")(
        y, deterministic=True)


def from_vit(module: vit.VisionTransformer, grid: int) -> NaFlexViT:
  """The NaFlexViT that runs a MAP-pooled VisionTransformer's params (load_npz's, at the
  file's own size so that the table keeps its grid x grid rows) on NaFlex inputs."""
  if module.classifier != "map" or module.posemb != "learn" or module.resnet_stages is not None:
    raise errors.InvalidInput(
        f"NaFlex runs plain MAP-pooled ViTs with a learned position table (SigLIP 2 towers), "
        f"not classifier={module.classifier!r}, posemb={module.posemb!r}")
  return NaFlexViT(module.num_classes, module.patch_size, module.hidden_size, module.mlp_dim,
                   module.num_heads, module.num_layers, grid, module.dtype)
