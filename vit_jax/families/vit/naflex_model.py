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

from typing import Any, Mapping, Optional

import flax.linen as nn
import jax.numpy as jnp

from vit_jax.base import errors
from vit_jax.families.vit import model as vit
from vit_jax.models import encoder_blocks
from vit_jax.models import memory_fit


class NaFlexViT(nn.Module):
  """A MAP-pooled ViT on NaFlex inputs; see the module docstring. Called with (patches,
  mask, grid) or with the main job's batch image, a dict {'patches', 'mask', 'grid'}.
  num_classes 0 or representation=True: the pooled representation [B, D]; else a `head`
  on it. Training: dropout, attention dropout and stochastic depth as the ViT's blocks
  (vit_jax.models.encoder_blocks), rematerialisation and scanned blocks too."""
  num_classes: int
  patch_size: int
  hidden_size: int
  mlp_dim: int
  num_heads: int
  num_layers: int
  posemb_grid: int = 16  # the position table's side (released: 16 x 16)
  dtype: Any = jnp.float32
  dropout_rate: float = 0.0
  attention_dropout_rate: float = 0.0
  stochastic_depth: float = 0.0
  head_bias_init: float = 0.0
  remat_policy: str = "none"
  scan_layers: bool = False
  fp8: bool = False

  @nn.compact
  def __call__(self, patches, mask=None, shapes=None, *, train: bool = False,
               representation: bool = False):
    if isinstance(patches, Mapping):  # a batch's image: vit_jax.data.batch_spec's NaFlex spec
      patches, mask, shapes = patches["patches"], patches["mask"], patches["grid"]
    x = PatchLinear(self.patch_size, self.hidden_size, self.dtype, name="embedding")(patches)
    mask = mask.astype(bool)
    options = encoder_blocks.BlockOptions(
        self.mlp_dim, self.num_heads, self.dropout_rate, self.attention_dropout_rate,
        self.dtype, fp8=self.fp8, stochastic_depth=self.stochastic_depth)
    x = encoder_blocks.Encoder(self.num_layers, options, self.remat_policy, self.scan_layers,
                               "naflex", (self.posemb_grid, self.posemb_grid),
                               name="Transformer")(x, train=train, grid=shapes, has_cls=False,
                                                   mask=mask)
    x = vit.MAPHead(self.mlp_dim, self.num_heads, self.dtype, name="MAPHead_0")(x, mask)
    if representation or not self.num_classes:
      return x.astype(jnp.float32)
    return nn.Dense(self.num_classes, name="head", dtype=self.dtype,
                    kernel_init=nn.initializers.zeros,
                    bias_init=nn.initializers.constant(self.head_bias_init))(x).astype(
                        jnp.float32)


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


def from_vit(module: vit.VisionTransformer, grid: int) -> NaFlexViT:
  """The NaFlexViT that runs a MAP-pooled VisionTransformer's params (load_npz's, at the
  file's own size so that the table keeps its grid x grid rows) on NaFlex inputs, with
  its training settings (dropout, stochastic depth, remat, scan, FP8, dtype)."""
  if (module.classifier != "map" or module.posemb != "learn" or module.resnet_stages is not None
      or module.representation_size is not None):
    raise errors.InvalidInput(
        f"NaFlex runs plain MAP-pooled ViTs with a learned position table (as it was trained), "
        f"not classifier={module.classifier!r}, posemb={module.posemb!r}"
        + (", with a ResNet stem" if module.resnet_stages is not None else "")
        + (", with pre_logits" if module.representation_size is not None else "")
        + ": use classifier='map', posemb='learn'")
  return NaFlexViT(module.num_classes, module.patch_size, module.hidden_size, module.mlp_dim,
                   module.num_heads, module.num_layers, grid, module.dtype,
                   module.dropout_rate, module.attention_dropout_rate, module.stochastic_depth,
                   module.head_bias_init, module.remat_policy, module.scan_layers, module.fp8)


def check_budget_fits(module, max_patches: int, batch_size: int, *,
                      memory_bytes: Optional[int] = None,
                      batch_flag: Optional[str] = "--batch_size") -> None:
  """Refuses, before any image is read, a NaFlex budget whose batch cannot fit the device
  (memory_bytes, default what is free: models.memory_fit, as zero-shot's batches are
  sized): its padded patches (float32
  [B, N, P*P*3]) and one layer's attention scores (float32 [B, heads, N, N], quadratic in
  the budget) alone need more. module: the ViT or NaFlexViT (its patch size and heads).
  One line instead of an allocation traceback; batch_flag: the tool's flag for the batch."""
  memory_bytes = memory_fit.available_bytes() if memory_bytes is None else memory_bytes
  needed = 4 * batch_size * max_patches * (3 * module.patch_size**2
                                           + module.num_heads * max_patches)
  if needed <= memory_bytes:
    return
  smaller = f", or a smaller {batch_flag}" if batch_size > 1 and batch_flag else ""
  raise errors.InvalidInput(
      f"--max_patches={max_patches}: a batch of {batch_size} at that budget needs "
      f"{needed / 2**30:,.1f} GiB (its patches and one layer's attention over {max_patches} "
      f"patches) and this device has {memory_bytes / 2**30:,.1f} GiB free: pass a smaller budget "
      f"(released NaFlex models read 256 to 1024){smaller}")
