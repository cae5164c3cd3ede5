"""The Transformer encoder of ViT (and of the text towers): pre-LN blocks of self-attention
and an MLP, their fast paths (rematerialisation, nn.scan over the blocks, FP8 matmuls) and
stochastic depth, and the two parameter layouts (per block as released, stacked when
scanned). Module names are the released checkpoints' (`encoderblock_i`, `LayerNorm_0`,
`MultiHeadDotProductAttention_1`, `LayerNorm_2`, `MlpBlock_3`); vit_jax.families.vit.model builds
the whole ViT around it, vit_jax.families.mixer.model reuses its MLP and stochastic depth."""

import dataclasses
from typing import Any, Dict, Optional, Tuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from vit_jax.base import errors
from vit_jax.models import attention
from vit_jax.models import posemb as posemb_lib
from vit_jax.models.fp8 import dot_general_for

LAYER_NORM_EPS = 1e-6


def layer_norm(name: str, dtype: Any) -> nn.LayerNorm:
  return nn.LayerNorm(epsilon=LAYER_NORM_EPS, dtype=dtype, name=name)


class MlpBlock(nn.Module):
  """Dense(mlp_dim) -> tanh-GELU -> dropout -> Dense(in) -> dropout."""
  mlp_dim: int
  dropout_rate: float = 0.0
  dtype: Any = jnp.float32
  fp8: bool = False

  @nn.compact
  def __call__(self, x, *, deterministic: bool):
    dense = lambda features, name: nn.Dense(
        features, dtype=self.dtype, name=name, dot_general=dot_general_for(self.fp8),
        kernel_init=nn.initializers.xavier_uniform(),
        bias_init=nn.initializers.normal(stddev=1e-6))
    y = dense(self.mlp_dim, "Dense_0")(x)
    y = nn.gelu(y, approximate=True)
    y = nn.Dropout(self.dropout_rate)(y, deterministic=deterministic)
    y = dense(x.shape[-1], "Dense_1")(y)
    return nn.Dropout(self.dropout_rate)(y, deterministic=deterministic)


REMAT_POLICIES = {
    "none": None,  # keep every activation (fastest, most memory)
    "full": jax.checkpoint_policies.nothing_saveable,  # recompute the whole block
    "dots": jax.checkpoint_policies.checkpoint_dots,  # keep matmul outputs only
    "dots_no_batch": jax.checkpoint_policies.dots_with_no_batch_dims_saveable,
}


@dataclasses.dataclass(frozen=True)
class BlockOptions:
  """What all encoder blocks share (meanings as in VisionTransformer)."""
  mlp_dim: int
  num_heads: int
  dropout_rate: float = 0.0
  attention_dropout_rate: float = 0.0
  dtype: Any = jnp.float32
  attention_impl: str = "softmax"
  unpadded_inference: bool = True
  fp8: bool = False
  stochastic_depth: float = 0.0  # the last block's drop rate; 0: off (no RNG drawn)


def stochastic_depth_rates(rate: float, num_layers: int) -> np.ndarray:
  """Block i's drop probability, rate * i / (num_layers - 1): 0 for the first block, `rate`
  for the last (DeiT's and timm's linear rule, `linspace(0, rate, depth)`)."""
  if num_layers < 2:
    return np.zeros((num_layers,), np.float32)
  return (rate * np.arange(num_layers) / (num_layers - 1)).astype(np.float32)


def drop_branch(module: nn.Module, branch, depth_drop, index: int, name: str):
  """Stochastic depth of one residual branch [B, ...]: per example, zero with probability p,
  else scaled by 1 / (1 - p), where depth_drop = (p, this block's key) and `index` tells the
  block's branches apart. Its keep mask [B] is sown as `name`."""
  rate, key = depth_drop
  keep = jax.random.bernoulli(jax.random.fold_in(key, index), 1.0 - rate, branch.shape[:1])
  module.sow("intermediates", name, keep)
  scale = (1.0 / (1.0 - rate)).astype(branch.dtype)
  keep = keep.reshape(keep.shape + (1,) * (branch.ndim - 1))
  return jnp.where(keep, branch * scale, jnp.zeros_like(branch))


class Encoder1DBlock(nn.Module):
  """Pre-LN transformer block: x + Drop(MHSA(LN(x))), then + MLP(LN(.)).

  With depth_drop = (p, key) (the Encoder passes it in training with stochastic depth),
  each residual branch (attention, MLP) is dropped per example with probability p (see
  drop_branch; masks sown as `stochastic_depth_attention` / `stochastic_depth_mlp`).
  mask [B, tokens] (True: a real token; NaFlex's padding is False) keeps padding out of
  every query's attention."""
  options: BlockOptions

  @nn.compact
  def __call__(self, inputs, deterministic: bool, depth_drop=None, mask=None):
    o = self.options
    x = layer_norm("LayerNorm_0", o.dtype)(inputs)
    x = attention.SelfAttention(o.num_heads, o.attention_dropout_rate, o.dtype, o.attention_impl,
                      o.unpadded_inference, o.fp8, name="MultiHeadDotProductAttention_1")(
                          x, deterministic=deterministic, mask=mask)
    x = nn.Dropout(o.dropout_rate)(x, deterministic=deterministic)
    if depth_drop is not None:
      x = drop_branch(self, x, depth_drop, 0, "stochastic_depth_attention")
    x = x + inputs
    y = layer_norm("LayerNorm_2", o.dtype)(x)
    y = MlpBlock(o.mlp_dim, o.dropout_rate, o.dtype, o.fp8,
                 name="MlpBlock_3")(y, deterministic=deterministic)
    if depth_drop is not None:
      y = drop_branch(self, y, depth_drop, 1, "stochastic_depth_mlp")
    out = x + y
    self.sow("intermediates", "block_output", out)
    return out


class ScannedBlock(Encoder1DBlock):
  """An encoder block as an nn.scan body: (carry, deterministic, depth_drop, mask) ->
  (carry, None), depth_drop scanned (one per block; None without stochastic depth).

  Under an fsdp mesh the carry is pinned to the batch split: inside the scan loop XLA's
  partitioner otherwise follows the weights split over `fsdp` and gathers the whole batch
  onto every device (ViT-S/16, 384 px, 64 images per core on a v2-8: 14.58 GiB per core
  instead of 4.48 GiB)."""

  def __call__(self, inputs, deterministic: bool, depth_drop=None, mask=None):
    return super().__call__(split_over_batch(inputs), deterministic, depth_drop, mask), None


def split_over_batch(x):
  """x [batch, ...] constrained to the batch axes (vit_jax.training.sharding.BATCH_AXES) of the
  mesh the step is traced under (vit_jax.training.sharding.on_mesh), where that mesh splits
  weights over `fsdp`; unchanged elsewhere."""
  mesh = jax.sharding.get_abstract_mesh()
  if mesh.empty or dict(mesh.shape).get("fsdp", 1) == 1 or "data" not in mesh.shape:
    return x
  spec = jax.sharding.PartitionSpec(("data", "fsdp"),
                                    *[jax.sharding.PartitionSpec.UNCONSTRAINED] * (x.ndim - 1))
  return jax.lax.with_sharding_constraint(x, jax.sharding.NamedSharding(mesh, spec))


SCANNED_BLOCKS = "encoderblock"  # name of the stacked blocks under `Transformer`


class Encoder(nn.Module):
  """Position embedding (see position_embedding) + dropout, `num_layers` blocks, final
  LayerNorm.

  scan_layers=True runs the blocks as one nn.scan body, so XLA compiles one block
  instead of num_layers (much faster compiles for deep models); their parameters are
  then stacked under `encoderblock` with a leading depth axis (convert with
  to_scan_layout / to_block_layout; .npz files always hold the per-block layout).
  Stochastic depth: the Encoder draws one `dropout` key per block (split from its own) and
  passes each block its (rate, key), a scanned input under scan_layers; so the rates still
  grow with depth there, and scanned and unrolled blocks drop the same branches.
  mask [B, tokens]: the real tokens (NaFlex; see Encoder1DBlock); posemb='naflex' resizes
  the learned posemb_grid table to each image's grid, `grid` being their (rows, cols) [B, 2].
  """
  num_layers: int
  options: BlockOptions
  remat_policy: str = "none"
  scan_layers: bool = False
  posemb: str = "learn"
  posemb_grid: Optional[Tuple[int, int]] = None

  @nn.compact
  def __call__(self, x, *, train: bool, grid: Tuple[int, int] = (0, 0), has_cls: bool = True,
               mask=None):
    if self.remat_policy not in REMAT_POLICIES:
      raise errors.InvalidInput(
          f"unknown remat_policy {self.remat_policy!r}; choose one of "
          f"{', '.join(REMAT_POLICIES)}")
    block = ScannedBlock if self.scan_layers else Encoder1DBlock
    if self.remat_policy != "none":  # same parameters, activations recomputed in backprop
      block = nn.remat(block, policy=REMAT_POLICIES[self.remat_policy],
                       static_argnums=(2,), prevent_cse=not self.scan_layers)
    x = position_embedding(x, self.posemb, grid, has_cls, self.posemb_grid)
    x = nn.Dropout(self.options.dropout_rate)(x, deterministic=not train)
    depth_drop = None  # in training with stochastic depth: (rates [L], keys [L])
    if train and self.options.stochastic_depth > 0:
      rates = stochastic_depth_rates(self.options.stochastic_depth, self.num_layers)
      depth_drop = (jnp.asarray(rates), jax.random.split(self.make_rng("dropout"),
                                                         self.num_layers))
    if self.scan_layers:
      stack = nn.scan(block, variable_axes={"params": 0, "intermediates": 0},
                      split_rngs={"params": True, "dropout": True},
                      in_axes=(nn.broadcast, 0 if depth_drop else nn.broadcast, nn.broadcast),
                      length=self.num_layers)
      x, _ = stack(self.options, name=SCANNED_BLOCKS)(x, not train, depth_drop, mask)
    else:
      for layer in range(self.num_layers):
        x = block(self.options, name=f"encoderblock_{layer}")(
            x, not train, jax.tree.map(lambda a, i=layer: a[i], depth_drop), mask)
    return layer_norm("encoder_norm", self.options.dtype)(x)


def to_scan_layout(params: Dict[str, Any]) -> Dict[str, Any]:
  """Per-block params (`encoderblock_{i}`) -> stacked (`encoderblock`, depth axis first).

  Stacks on the host (numpy), like load_npz's params: placing them is the caller's job."""
  encoder = dict(params["Transformer"])
  names = sorted((k for k in encoder if k.startswith(SCANNED_BLOCKS + "_")),
                 key=lambda k: int(k.rsplit("_", 1)[1]))
  if not names:
    return params
  blocks = [encoder.pop(name) for name in names]
  encoder[SCANNED_BLOCKS] = jax.tree.map(lambda *layers: np.stack(layers), *blocks)
  return {**params, "Transformer": encoder}


def to_block_layout(params: Dict[str, Any]) -> Dict[str, Any]:
  """Stacked params (`encoderblock`) -> per-block (`encoderblock_{i}`), the released layout."""
  encoder = dict(params["Transformer"])
  if SCANNED_BLOCKS not in encoder:
    return params
  stacked = encoder.pop(SCANNED_BLOCKS)
  depth = jax.tree.leaves(stacked)[0].shape[0]
  for layer in range(depth):
    encoder[f"{SCANNED_BLOCKS}_{layer}"] = jax.tree.map(lambda a, i=layer: a[i], stacked)
  return {**params, "Transformer": encoder}


class AddPositionEmbs(nn.Module):
  """Adds a learned (1, tokens, D) position embedding (normal(0.02) init).

  The table keeps the grid it was made for (`stored_grid` at init, else the input's); for
  inputs of another grid it is resized in the forward pass with posemb.resize_posemb, the
  resize load_npz applies to files, so both give the same bits. A stored grid that is not
  square must be named by stored_grid. per_image (NaFlex): the square stored_grid table
  resized to each image's grid, `grid` being their (rows, cols) [B, 2]
  (posemb.resize_posemb_per_image)."""
  stored_grid: Optional[Tuple[int, int]] = None
  per_image: bool = False

  @nn.compact
  def __call__(self, x, grid: Optional[Tuple[int, int]] = None, has_cls: bool = True):
    if self.per_image:
      table = self.param("pos_embedding", nn.initializers.normal(stddev=0.02),
                         (1, self.stored_grid[0] * self.stored_grid[1], x.shape[-1]),
                         jnp.float32)
      return x + posemb_lib.resize_posemb_per_image(table, grid, x.shape[1]).astype(x.dtype)
    if self.has_variable("params", "pos_embedding"):
      shape = nn.unbox(self.get_variable("params", "pos_embedding")).shape
    elif self.stored_grid is not None:
      shape = (1, has_cls + self.stored_grid[0] * self.stored_grid[1], x.shape[-1])
    else:
      shape = (1, *x.shape[1:])
    posemb = self.param("pos_embedding", nn.initializers.normal(stddev=0.02), shape,
                        jnp.float32)
    if shape[1] != x.shape[1]:
      posemb = posemb_lib.resize_posemb(posemb, grid, has_cls, self.stored_grid)
    return x + posemb.astype(x.dtype)


def position_embedding(x, kind: str, grid: Tuple[int, int], has_cls: bool,
                       stored_grid: Optional[Tuple[int, int]] = None):
  """x + the position embedding: the learned `posembed_input` table (its class-token row
  included; see AddPositionEmbs), or the fixed sincos2d table (the class token, if any,
  gets none); 'none' adds nothing (text towers add their own table before the encoder);
  'naflex': the learned table resized per image (AddPositionEmbs' per_image)."""
  if kind == "none":
    return x
  if kind == "naflex":
    return AddPositionEmbs(stored_grid, per_image=True, name="posembed_input")(x, grid, False)
  if kind == "learn":
    return AddPositionEmbs(stored_grid, name="posembed_input")(x, grid, has_cls)
  return x + jnp.asarray(posemb_lib.sincos_2d_with_cls(grid, x.shape[-1], has_cls), x.dtype)
