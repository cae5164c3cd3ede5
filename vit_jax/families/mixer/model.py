"""MLP-Mixer (Tolstikhin et al., 2021) as Flax linen modules, the original repository's
second model family.

The parameter tree IS the released files' layout (`stem`, `MixerBlock_{i}` with
`LayerNorm_0`, `token_mixing`, `LayerNorm_1`, `channel_mixing`, `pre_head_layer_norm`,
`head`), so a released .npz is a plain flatten/unflatten, as for the ViT. The MLPs are
encoder_blocks.MlpBlock (tanh GELU, as flax.linen.gelu in the original code; dropout is off
by default, the original has none), so the training options of the ViT's blocks apply
unchanged: dropout, stochastic depth (encoder_blocks.drop_branch), bf16, remat, scan and FP8.

The token-mixing MLP's input width is the patch count, so a Mixer runs at the grid it was
built for only; fine-tuning at another resolution changes the weights' shapes (see
vit_jax.families.mixer.resize).
"""

from typing import Any, Dict

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from vit_jax.base import errors
from vit_jax.families.vit import model as vit
from vit_jax.models import encoder_blocks

SCANNED_BLOCKS = "MixerBlock"  # the stacked blocks' name under scan_layers=True


class MixerBlock(nn.Module):
  """x + TokenMLP(LN(x)^T)^T, then + ChannelMLP(LN(.)), each branch optionally dropped per
  example (stochastic depth: depth_drop = (p, key), see encoder_blocks.drop_branch)."""
  tokens_mlp_dim: int
  channels_mlp_dim: int
  dropout_rate: float = 0.0
  dtype: Any = jnp.float32
  fp8: bool = False

  @nn.compact
  def __call__(self, x, deterministic: bool, depth_drop=None):
    y = encoder_blocks.layer_norm("LayerNorm_0", self.dtype)(x)
    y = jnp.swapaxes(y, 1, 2)  # [B, channels, tokens]: the MLP mixes the tokens
    y = encoder_blocks.MlpBlock(self.tokens_mlp_dim, self.dropout_rate, self.dtype, self.fp8,
                                name="token_mixing")(y, deterministic=deterministic)
    y = jnp.swapaxes(y, 1, 2)
    if depth_drop is not None:
      y = encoder_blocks.drop_branch(self, y, depth_drop, 0, "stochastic_depth_token_mixing")
    x = x + y
    y = encoder_blocks.layer_norm("LayerNorm_1", self.dtype)(x)
    y = encoder_blocks.MlpBlock(self.channels_mlp_dim, self.dropout_rate, self.dtype, self.fp8,
                                name="channel_mixing")(y, deterministic=deterministic)
    if depth_drop is not None:
      y = encoder_blocks.drop_branch(self, y, depth_drop, 1, "stochastic_depth_channel_mixing")
    out = x + y
    self.sow("intermediates", "block_output", out)
    return out


class ScannedMixerBlock(MixerBlock):
  """A Mixer block as an nn.scan body: (carry, ...) -> (carry, None)."""

  def __call__(self, x, deterministic: bool, depth_drop=None):
    return super().__call__(x, deterministic, depth_drop), None


class MlpMixer(nn.Module):
  """Mixer classifier: the same function as the original `models_mixer.MlpMixer`.

  Attributes (the original's names):
    num_classes: size of the zero-initialised `head` (0: no head, pooled features out).
    patch_size: side of the square patches cut by the `stem` conv (SAME padding, as the
      original's nn.Conv default: sides that are multiples of it are cut exactly).
    hidden_dim, num_blocks, tokens_mlp_dim, channels_mlp_dim: the Mixer paper's C, depth,
      D_S and D_C.
    dropout_rate: dropout inside both MLPs, only with train=True (the original has none).
    stochastic_depth: block i's token- and channel-mixing branches each dropped per example
      with probability stochastic_depth * i / (num_blocks - 1), as the ViT's.
    dtype, remat_policy, scan_layers, fp8: as VisionTransformer's (scan stacks the blocks
      under `MixerBlock`; files always hold one entry per block).
  """
  num_classes: int
  patch_size: int
  hidden_dim: int
  num_blocks: int
  tokens_mlp_dim: int
  channels_mlp_dim: int
  dropout_rate: float = 0.0
  stochastic_depth: float = 0.0
  head_bias_init: float = 0.0
  dtype: Any = jnp.float32
  remat_policy: str = "none"
  scan_layers: bool = False
  fp8: bool = False

  @nn.compact
  def __call__(self, images, *, train: bool = False, representation: bool = False):
    """Logits (float32 [B, num_classes]); with representation=True (or no head) the
    pre-head features: the mean over tokens after `pre_head_layer_norm`."""
    vit.check_images(images)
    x = nn.Conv(self.hidden_dim, (self.patch_size, self.patch_size),
                strides=(self.patch_size, self.patch_size), padding="SAME", dtype=self.dtype,
                name="stem")(images.astype(self.dtype))
    batch, height, width, channels = x.shape
    x = self.mix(x.reshape(batch, height * width, channels), train=train)
    x = jnp.mean(encoder_blocks.layer_norm("pre_head_layer_norm", self.dtype)(x), axis=1)
    if representation or not self.num_classes:
      return x.astype(jnp.float32)
    logits = nn.Dense(self.num_classes, dtype=self.dtype, name="head",
                      kernel_init=nn.initializers.zeros,
                      bias_init=nn.initializers.constant(self.head_bias_init))(x)
    return logits.astype(jnp.float32)

  def mix(self, x, *, train: bool):
    """The Mixer blocks on tokens [B, patches, C] (unrolled, or one nn.scan body)."""
    if self.remat_policy not in encoder_blocks.REMAT_POLICIES:
      raise errors.InvalidInput(f"unknown remat_policy {self.remat_policy!r}; choose one of "
                                f"{', '.join(encoder_blocks.REMAT_POLICIES)}")
    block = ScannedMixerBlock if self.scan_layers else MixerBlock
    if self.remat_policy != "none":
      block = nn.remat(block, policy=encoder_blocks.REMAT_POLICIES[self.remat_policy],
                       static_argnums=(2,), prevent_cse=not self.scan_layers)
    args = (self.tokens_mlp_dim, self.channels_mlp_dim, self.dropout_rate, self.dtype, self.fp8)
    depth_drop = ()  # in training with stochastic depth: ((rates [N], keys [N]),)
    if train and self.stochastic_depth > 0:
      rates = encoder_blocks.stochastic_depth_rates(self.stochastic_depth, self.num_blocks)
      depth_drop = ((jnp.asarray(rates),
                     jax.random.split(self.make_rng("dropout"), self.num_blocks)),)
    if self.scan_layers:
      stack = nn.scan(block, variable_axes={"params": 0, "intermediates": 0},
                      split_rngs={"params": True, "dropout": True},
                      in_axes=(nn.broadcast, 0) if depth_drop else nn.broadcast,
                      length=self.num_blocks)
      x, _ = stack(*args, name=SCANNED_BLOCKS)(x, not train, *depth_drop)
      return x
    for i in range(self.num_blocks):
      x = block(*args, name=f"{SCANNED_BLOCKS}_{i}")(
          x, not train, *jax.tree.map(lambda a, i=i: a[i], depth_drop))
    return x


def token_grid(module: MlpMixer, image_side: int) -> int:
  """Patches per side for an input side (the stem's SAME padding rounds up)."""
  return -(-image_side // module.patch_size)


def to_scan_layout(params: Dict[str, Any]) -> Dict[str, Any]:
  """Per-block params (`MixerBlock_{i}`) -> stacked (`MixerBlock`, depth axis first),
  on the host (numpy)."""
  params = dict(params)
  names = sorted((k for k in params if k.startswith(SCANNED_BLOCKS + "_")),
                 key=lambda k: int(k.rsplit("_", 1)[1]))
  if not names:
    return params
  blocks = [params.pop(name) for name in names]
  params[SCANNED_BLOCKS] = jax.tree.map(lambda *layers: np.stack(layers), *blocks)
  return params


def to_block_layout(params: Dict[str, Any]) -> Dict[str, Any]:
  """Stacked params (`MixerBlock`) -> per-block (`MixerBlock_{i}`), the released layout."""
  params = dict(params)
  if SCANNED_BLOCKS not in params:
    return params
  stacked = params.pop(SCANNED_BLOCKS)
  for i in range(jax.tree.leaves(stacked)[0].shape[0]):
    params[f"{SCANNED_BLOCKS}_{i}"] = jax.tree.map(lambda a, i=i: a[i], stacked)
  return params


def is_mixer_params(params: Any) -> bool:
  """Whether a (nested or flat '/'-keyed) parameter tree is a Mixer's: it has a `stem`."""
  return any(str(key).split("/", 1)[0] == "stem" for key in params)
