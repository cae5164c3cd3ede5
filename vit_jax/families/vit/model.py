"""The Vision Transformer (Dosovitskiy et al., ICLR 2021) as Flax linen modules.

Module names are chosen so that the parameter tree IS the released checkpoints'
layout (pre-Linen numbering inside each encoder block: `LayerNorm_0`,
`MultiHeadDotProductAttention_1`, `LayerNorm_2`, `MlpBlock_3`), which keeps the
.npz mapping a plain flatten/unflatten.

Introspection: every block sows its attention weights (`attention_weights`) and
its output (`block_output`) into the `intermediates` collection. Sowing is a no-op
unless the caller passes `mutable=['intermediates']`, so the default path is unchanged.
With scan_layers=True they sit under `Transformer/encoderblock`, stacked by depth.

big_vision's ViT variants are the same modules with its names: `classifier='map'`
(multi-head attention pooling, `MAPHead_0`, no class token) and `posemb='sincos2d'`
(a fixed 2-D sin-cos table instead of the learned `pos_embedding`).
"""

from typing import Any, Optional, Sequence, Tuple

import flax.linen as nn
import jax.numpy as jnp

from vit_jax.base import errors
from vit_jax.families.vit import hybrid_stem
from vit_jax.models import attention, encoder_blocks, patch_resize


class MAPHead(nn.Module):
  """big_vision's multi-head attention pooling: a learned `probe` query attends to all
  tokens, then a residual pre-LN MLP; returns [B, D]. Same names as big_vision
  (`MultiHeadDotProductAttention_0`, `LayerNorm_0`, `MlpBlock_0`). mask [B, N]: the
  tokens that count (NaFlex padding does not)."""
  mlp_dim: int
  num_heads: int
  dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, x, mask=None):
    probe = self.param("probe", nn.initializers.xavier_uniform(), (1, 1, x.shape[-1]),
                       jnp.float32)
    probe = jnp.tile(probe.astype(x.dtype), (x.shape[0], 1, 1))
    y = attention.SelfAttention(self.num_heads, dtype=self.dtype,
                                name="MultiHeadDotProductAttention_0")(
                                    probe, deterministic=True, inputs_kv=x, mask=mask)
    z = encoder_blocks.layer_norm("LayerNorm_0", self.dtype)(y)
    y = y + encoder_blocks.MlpBlock(self.mlp_dim, dtype=self.dtype, name="MlpBlock_0")(
        z, deterministic=True)
    return y[:, 0]


CLASSIFIERS = ("token", "gap", "map")
POSEMBS = ("learn", "sincos2d")


def check_images(images) -> None:
  """Integer pixels (uint8 0..255) ran silently and gave wrong answers, and a list, NCHW or
  unbatched input failed in Flax internals: each is one line saying what the model takes."""
  shape, dtype = getattr(images, "shape", None), getattr(images, "dtype", None)
  if shape is None or dtype is None:
    raise errors.InvalidInput(f"images must be an array [batch, height, width, 3] (numpy or "
                              f"jax), got {type(images).__name__}: pass np.asarray(images)")
  if not jnp.issubdtype(dtype, jnp.floating):
    raise errors.InvalidInput(
        f"images are {dtype} pixels; the model takes floats in [-1, 1], the range it was "
        "trained on: pass images / 127.5 - 1 for 0..255 pixels")
  if len(shape) != 4 or shape[-1] != 3:
    hint = (" (channels first? transpose(0, 2, 3, 1))" if len(shape) == 4 and shape[1] == 3
            else " (one image? add a batch axis: images[None])" if len(shape) == 3 else "")
    raise errors.InvalidInput(f"images have shape {tuple(shape)}; the model takes "
                              f"[batch, height, width, 3], channels last{hint}")


class VisionTransformer(nn.Module):
  """ViT classifier, optionally on top of a ResNet stem (the hybrid models).

  Attributes:
    num_classes: size of the zero-initialised `head`.
    patch_size: side of the square patches cut by the `embedding` conv (on the
      image, or on the stem's feature map for hybrids). VALID padding: pixels that
      do not fill a whole patch are dropped.
    hidden_size, mlp_dim, num_heads, num_layers: transformer width and depth.
    resnet_stages: units per ResNet stage, `()` for the root conv only, None for
      no stem (plain ViT).
    resnet_width: ResNet width factor (stage widths 64, 128, ... times it).
    classifier: 'token' (class token, index 0), 'gap' (mean of the tokens after
      `encoder_norm`, no class token) or 'map' (big_vision's multi-head attention
      pooling `MAPHead_0` over the tokens after `encoder_norm`, no class token).
    posemb: 'learn' (the learned `Transformer/posembed_input/pos_embedding`) or
      'sincos2d' (big_vision's fixed 2-D sin-cos table: no parameter, any grid).
    representation_size: if set, a `pre_logits` Dense + tanh before the head.
    dropout_rate, attention_dropout_rate: only active with `train=True`.
    stochastic_depth: only with `train=True`: block i's attention and MLP residual branches
      are each dropped per example with probability stochastic_depth * i / (num_layers - 1)
      (DeiT's and timm's linear rule: the first block never, the last at this rate), kept
      ones scaled by 1 / (1 - p); masks from the `dropout` RNG stream. No parameters:
      released checkpoints load unchanged. big_vision's public ViT has no stochastic depth
      and the AugReg code that used it (the `sd_` of the released names) is not public, so
      its exact rule is not known here.
    head_bias_init: constant head bias (-10 was used for i21k pre-training).
    dtype: compute dtype; parameters are always stored in float32.
    attention_impl: 'softmax' (explicit, float32 softmax), 'dot_product' (fused:
      cuDNN flash attention on GPUs in bf16/fp16, XLA otherwise), or 'xla' / 'cudnn'
      to force one backend. Same function.
    unpadded_inference: cuDNN attention pads odd token counts (197, 577) to even for its
      backward pass; True pads only where gradients are taken: with train=False the
      forward runs unpadded (~3% faster B/16 inference on an H100). Same function.
    remat_policy: rematerialise each block in backprop to save memory: 'none',
      'full', 'dots' or 'dots_no_batch' (which activations are kept).
    scan_layers: run the blocks with nn.scan (one compiled block; params stacked
      under Transformer/encoderblock, see to_scan_layout). Same function.
    kernel_size: side of the stored `embedding` kernel when it is not patch_size
      (FlexiViT's underlying 32): PI-resized to patch_size in the forward pass
      (vit_jax.models.patch_resize).
    posemb_grid: grid of the stored learned position embedding when it is not the
      input's at init (FlexiViT's underlying 7x7), or when it is not square. Any input
      size runs: a table of another grid is resized in the forward pass (AddPositionEmbs).
    fp8: the encoder blocks' dense layers (attention projections, MLP) multiply in FP8
      (vit_jax.models.fp8: per-tensor scaled e4m3, e5m2 gradients); same parameters.
  """
  num_classes: int
  patch_size: int
  hidden_size: int
  mlp_dim: int
  num_heads: int
  num_layers: int
  resnet_stages: Optional[Sequence[int]] = None
  resnet_width: float = 1
  classifier: str = "token"
  posemb: str = "learn"
  representation_size: Optional[int] = None
  dropout_rate: float = 0.0
  attention_dropout_rate: float = 0.0
  stochastic_depth: float = 0.0
  head_bias_init: float = 0.0
  dtype: Any = jnp.float32
  attention_impl: str = "softmax"
  unpadded_inference: bool = True
  remat_policy: str = "none"
  scan_layers: bool = False
  kernel_size: Optional[int] = None
  posemb_grid: Optional[Tuple[int, int]] = None
  fp8: bool = False

  @nn.compact
  def __call__(self, images, *, train: bool = False, representation: bool = False):
    """Logits (float32 [B, num_classes]); with representation=True the input of the
    head instead (pre_logits output, or the pooled token when there is none): the
    frozen features that few-shot probes and linear evaluation use."""
    x = self.pool(self.encode(*self.embed_patches(images), train=train))
    if self.representation_size is not None:
      x = nn.tanh(nn.Dense(self.representation_size, dtype=self.dtype, name="pre_logits")(x))
    if representation:
      return x.astype(jnp.float32)
    logits = nn.Dense(self.num_classes, dtype=self.dtype, name="head",
                      kernel_init=nn.initializers.zeros,
                      bias_init=nn.initializers.constant(self.head_bias_init))(x)
    return logits.astype(jnp.float32)

  # The pieces of __call__, also called from the compact __call__ of subclasses that
  # reuse the backbone under the same parameter names (vit_jax.families.vit.masked_patch_model).

  def embed_patches(self, images):
    """(patch embeddings [B, patches, D] in row-major order, the patch grid (rows,
    columns)): the `embedding` conv on the image, or on the ResNet stem's feature map."""
    if self.classifier not in CLASSIFIERS:
      raise errors.InvalidInput(
          f"classifier must be one of {', '.join(CLASSIFIERS)}, got "
          f"{self.classifier!r}")
    if self.posemb not in POSEMBS:
      raise errors.InvalidInput(f"posemb must be one of {', '.join(POSEMBS)}, got {self.posemb!r}")
    check_images(images)
    x = images.astype(self.dtype)
    if self.resnet_stages is not None:
      x = hybrid_stem.apply_stem(x, self.resnet_stages, self.resnet_width, self.dtype)
    x = patch_resize.PatchEmbedding(self.hidden_size, self.patch_size, self.kernel_size,
                                    self.dtype, name="embedding")(x)
    batch, height, width, channels = x.shape
    return x.reshape(batch, height * width, channels), (height, width)

  def encode(self, x, grid, *, train: bool):
    """Output tokens [B, tokens, D] after `encoder_norm`; the class token (`cls`) is
    prepended (index 0) when classifier='token', position embeddings added inside."""
    if self.classifier == "token":
      batch, _, channels = x.shape
      cls = self.param("cls", nn.initializers.zeros, (1, 1, channels), jnp.float32)
      x = jnp.concatenate([jnp.tile(cls.astype(x.dtype), (batch, 1, 1)), x], axis=1)
    options = encoder_blocks.BlockOptions(
        self.mlp_dim, self.num_heads, self.dropout_rate, self.attention_dropout_rate, self.dtype,
        self.attention_impl, self.unpadded_inference, self.fp8, self.stochastic_depth)
    return encoder_blocks.Encoder(self.num_layers, options, self.remat_policy, self.scan_layers,
                                  self.posemb, self.posemb_grid, name="Transformer")(
                                      x, train=train, grid=grid,
                                      has_cls=self.classifier == "token")

  def pool(self, tokens):
    """The image's representation [B, D]: the class token, the mean of all tokens
    ('gap'), or their attention pooling ('map')."""
    if self.classifier == "token":
      return tokens[:, 0]
    if self.classifier == "gap":
      return jnp.mean(tokens, axis=1)
    return MAPHead(self.mlp_dim, self.num_heads, self.dtype, name="MAPHead_0")(tokens)
