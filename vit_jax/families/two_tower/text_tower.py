"""Text towers of the two-tower (image, text) models, with their released parameter names.

* TextTransformer: LiT's small text transformer (`models_lit.TextTransformer`, LiT-L16S and
  L16Ti) and SigLIP's / SigLIP 2's (big_vision `proj.image_text.text_transformer`): token
  embedding `Embed_0` + a learned `pos_embedding` + this project's ViT encoder (`Encoder_0`,
  the released block numbering; big_vision's Linen numbering is renamed on load), pooled on
  the LAST token (the sticky end-of-sequence token), then an optional `head` Dense.
* BertTextEncoder: BERT as flaxformer's `BertEncoder` names its parameters (LiT-B16B, B16B_2,
  L16L): post-LN blocks, 2-D kernels, token + position + segment embeddings, padding (id 0)
  masked in attention, pooled on [CLS] (position 0), then an optional `head` Dense.

Both take int token ids [B, L] and return float32 [B, out] (out = head size, else width).
"""

from typing import Any, Optional, Tuple

import flax.linen as nn
import jax.numpy as jnp
import numpy as np

from vit_jax.base import errors
from vit_jax.models import encoder_blocks

POOLS = ("last", "first", "gap")
BERT_LAYER_NORM_EPS = 1e-12  # flaxformer's BertBaseConfig / BertLargeConfig


def _head(x, num_classes: Optional[int], dtype: Any):
  """The optional out projection `head` (None or 0: the pooled features themselves)."""
  if num_classes:
    x = nn.Dense(num_classes, dtype=dtype, name="head")(x)
  return x.astype(jnp.float32)


class TextTransformer(nn.Module):
  """LiT's / big_vision's text transformer (see the module docstring).

  Attributes: num_classes (head size, None for no head), width, depth, mlp_dim, num_heads,
  vocab_size, max_len (rows of the position table: the longest input; shorter inputs use
  its first rows), pool ('last' as released; 'first', 'gap'), dtype (compute)."""
  num_classes: Optional[int]
  width: int
  depth: int
  mlp_dim: int
  num_heads: int
  vocab_size: int
  max_len: int
  pool: str = "last"
  dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, tokens, *, train: bool = False):
    if self.pool not in POOLS:
      raise errors.InvalidInput(f"pool must be one of {', '.join(POOLS)}, got {self.pool!r}")
    x = nn.Embed(self.vocab_size, self.width, name="Embed_0")(tokens).astype(self.dtype)
    posemb = self.param("pos_embedding", nn.initializers.normal(stddev=1 / np.sqrt(self.width)),
                        (1, self.max_len, self.width), jnp.float32)
    if x.shape[1] > self.max_len:
      raise errors.InvalidInput(f"{x.shape[1]} tokens, but this text tower takes at most "
                                f"{self.max_len}: tokenize with max_len={self.max_len}")
    x = x + posemb[:, :x.shape[1]].astype(self.dtype)
    options = encoder_blocks.BlockOptions(self.mlp_dim, self.num_heads, dtype=self.dtype)
    x = encoder_blocks.Encoder(self.depth, options, posemb="none", name="Encoder_0")(x, train=train)
    pooled = {"last": lambda: x[:, -1], "first": lambda: x[:, 0],
              "gap": lambda: jnp.mean(x, axis=1)}[self.pool]()
    return _head(pooled, self.num_classes, self.dtype)


class _BertSelfAttention(nn.Module):
  """flaxformer's `attention_layer`: query/key/value projections (2-D kernels), softmax
  attention with `mask` [B, 1, 1, L] (False: a padding key, never attended); returns the
  heads concatenated [B, L, width] (the output projection is the block's `dense_layer`)."""
  num_heads: int
  dtype: Any

  @nn.compact
  def __call__(self, x, mask):
    batch, length, width = x.shape
    head_dim = width // self.num_heads
    split = lambda name: nn.Dense(width, dtype=self.dtype, name=name)(x).reshape(
        batch, length, self.num_heads, head_dim)
    query, key, value = split("query"), split("key"), split("value")
    logits = jnp.einsum("bqhd,bkhd->bhqk", query / np.sqrt(head_dim).astype(self.dtype), key)
    weights = nn.softmax(jnp.where(mask, logits.astype(jnp.float32), -1e10), axis=-1)
    mixed = jnp.einsum("bhqk,bkhd->bqhd", weights.astype(self.dtype), value)
    return mixed.reshape(batch, length, width)


class _BertMlp(nn.Module):
  """flaxformer's `mlp`: its `dense_layer`, then tanh GELU (flax's default, which flaxformer's
  BERT uses)."""
  mlp_dim: int
  dtype: Any

  @nn.compact
  def __call__(self, x):
    return nn.gelu(nn.Dense(self.mlp_dim, dtype=self.dtype, name="dense_layer")(x),
                   approximate=True)


class _BertSubBlock(nn.Module):
  """flaxformer's attention_block / mlp_block, post-LN: layer_norm(x + dense_layer(f(x))),
  f the masked self-attention (mlp_dim None) or the MLP."""
  num_heads: int
  mlp_dim: Optional[int]
  dtype: Any

  @nn.compact
  def __call__(self, x, mask):
    if self.mlp_dim is None:
      y = _BertSelfAttention(self.num_heads, self.dtype, name="attention_layer")(x, mask)
    else:
      y = _BertMlp(self.mlp_dim, self.dtype, name="mlp")(x)
    y = nn.Dense(x.shape[-1], dtype=self.dtype, name="dense_layer")(y)
    return nn.LayerNorm(epsilon=BERT_LAYER_NORM_EPS, dtype=self.dtype, name="layer_norm")(x + y)


class _BertLayers(nn.Module):
  """flaxformer's encoder_block (wrap=True) or its layer_sequence: `layers_{i}`, each an
  attention_block then an mlp_block."""
  depth: int
  mlp_dim: int
  num_heads: int
  dtype: Any
  wrap: bool = False

  @nn.compact
  def __call__(self, x, mask):
    if self.wrap:
      return _BertLayers(self.depth, self.mlp_dim, self.num_heads, self.dtype,
                         name="layer_sequence")(x, mask)
    for i in range(self.depth):
      x = _BertLayer(self.mlp_dim, self.num_heads, self.dtype, name=f"layers_{i}")(x, mask)
    return x


class _BertLayer(nn.Module):
  mlp_dim: int
  num_heads: int
  dtype: Any

  @nn.compact
  def __call__(self, x, mask):
    x = _BertSubBlock(self.num_heads, None, self.dtype, name="attention_block")(x, mask)
    return _BertSubBlock(self.num_heads, self.mlp_dim, self.dtype, name="mlp_block")(x, mask)


class _BertEncoder(nn.Module):
  """flaxformer's BertEncoder: `embedder` (token, position and segment tables, summed),
  `layer_norm`, `encoder_block`; all tokens segment 0 at positions 0..L-1, padding (id 0)
  masked, as models_lit.BertModel runs it."""
  width: int
  depth: int
  mlp_dim: int
  num_heads: int
  table_sizes: Tuple[int, int, int]  # vocabulary, positions, segments
  dtype: Any

  @nn.compact
  def __call__(self, tokens):
    positions = jnp.broadcast_to(jnp.arange(tokens.shape[1]), tokens.shape)
    x = _BertEmbedder(self.width, self.table_sizes, name="embedder")(
        tokens, positions, jnp.zeros_like(tokens))
    x = nn.LayerNorm(epsilon=BERT_LAYER_NORM_EPS, dtype=self.dtype, name="layer_norm")(
        x.astype(self.dtype))
    mask = (tokens != 0)[:, None, None, :]
    return _BertLayers(self.depth, self.mlp_dim, self.num_heads, self.dtype, wrap=True,
                       name="encoder_block")(x, mask)


class _BertEmbedder(nn.Module):
  width: int
  table_sizes: Tuple[int, int, int]

  @nn.compact
  def __call__(self, *ids):
    names = ("token_ids", "position_ids", "segment_ids")
    return sum(nn.Embed(rows, self.width, name=f"embedders_{name}")(i)
               for rows, name, i in zip(self.table_sizes, names, ids))


class BertTextEncoder(nn.Module):
  """LiT's BERT text tower (see the module docstring): `BertEncoder_0` pooled on [CLS],
  then an optional `head`.

  Attributes: num_classes (head size, None for no head), width, depth, mlp_dim, num_heads,
  vocab_size, max_length (the position table's rows), num_segments, dtype."""
  num_classes: Optional[int]
  width: int
  depth: int
  mlp_dim: int
  num_heads: int
  vocab_size: int
  max_length: int = 512
  num_segments: int = 2
  dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, tokens, *, train: bool = False):
    del train  # LiT's text towers run without dropout here (inference, features)
    x = _BertEncoder(self.width, self.depth, self.mlp_dim, self.num_heads,
                     (self.vocab_size, self.max_length, self.num_segments), self.dtype,
                     name="BertEncoder_0")(tokens)
    return _head(x[:, 0], self.num_classes, self.dtype)
