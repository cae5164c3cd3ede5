"""The ViT of masked patch prediction (paper section 4.6 and App. B.1.2).

MaskedPatchPredictor IS a VisionTransformer (same attributes, same backbone parameter
names: `embedding`, `cls`, `Transformer/...`), plus two parameters of its own:

  * `mask_embedding` (1, 1, D): the learned [mask] embedding;
  * `mpp_head` (Dense D -> predictions_per_patch * prediction_size, zero init): one linear
    prediction from each patch's output token (after `encoder_norm`).

Corruption acts on the patch embeddings: after the `embedding` conv and before the class
token is prepended and the position embeddings are added, so a corrupted patch still
carries its position (the model is asked what is at a known place). The draw of which
patches to corrupt and how is the caller's (vit_jax.training.objectives.mpp.sample_corruption);
this module only applies it. There is no classification head and no `pre_logits`:
vit_jax.training.objectives.mpp.export_backbone turns the parameters into a plain ViT checkpoint.
"""

import dataclasses
from typing import NamedTuple, Optional

import flax.linen as nn
import jax
import jax.numpy as jnp

from vit_jax.base import errors
from vit_jax.families.vit import model as vit

MASK_EMBEDDING = "mask_embedding"
PREDICTION_HEAD = "mpp_head"


class Corruption(NamedTuple):
  """Per patch ([B, N], row-major patch order): which patches are corrupted, which of
  those get the [mask] embedding, which a random other patch's embedding (the one at
  `source`, an index into the same image's patches); the rest of the corrupted ones are
  kept unchanged."""
  corrupted: jax.Array  # bool
  replace_mask: jax.Array  # bool, implies corrupted
  replace_random: jax.Array  # bool, implies corrupted
  source: jax.Array  # int32 in [0, N)


def apply_corruption(embeddings: jax.Array, corruption: Corruption,
                     mask_embedding: jax.Array) -> jax.Array:
  """Patch embeddings [B, N, D] with the corruption applied. Random replacements are
  taken from the uncorrupted embeddings."""
  random_patches = jnp.take_along_axis(embeddings, corruption.source[..., None], axis=1)
  x = jnp.where(corruption.replace_random[..., None], random_patches, embeddings)
  return jnp.where(corruption.replace_mask[..., None], mask_embedding.astype(x.dtype), x)


class MaskedPatchPredictor(vit.VisionTransformer):
  """A ViT backbone that predicts per patch `predictions_per_patch` vectors of
  `prediction_size` (class logits, or regressed values). `num_classes` is unused (pass 0)
  and `representation_size` must be None."""
  predictions_per_patch: int = 1
  prediction_size: int = 512

  @nn.compact
  def __call__(self, images, *, train: bool = False, representation: bool = False,
               corruption: Optional[Corruption] = None):
    """Predictions float32 [B, N, predictions_per_patch, prediction_size] for every patch
    (the loss picks the corrupted ones); with representation=True the pooled token
    [B, D] instead (the backbone's features, as VisionTransformer gives them)."""
    if self.representation_size is not None:
      raise errors.InvalidInput(
          "masked patch prediction has no pre_logits layer: leave "
          "representation_size None")
    x, grid = self.embed_patches(images)
    batch, patches, hidden = x.shape
    mask_embedding = self.param(MASK_EMBEDDING, nn.initializers.normal(stddev=0.02),
                                (1, 1, hidden), jnp.float32)
    if corruption is not None:
      x = apply_corruption(x, corruption, mask_embedding)
    tokens = self.encode(x, grid, train=train)
    if representation:
      return self.pool(tokens).astype(jnp.float32)
    patch_tokens = tokens[:, 1:] if self.classifier == "token" else tokens
    outputs = self.predictions_per_patch * self.prediction_size
    predictions = nn.Dense(outputs, dtype=self.dtype, name=PREDICTION_HEAD,
                           kernel_init=nn.initializers.zeros)(patch_tokens)
    return predictions.reshape(batch, patches, self.predictions_per_patch,
                               self.prediction_size).astype(jnp.float32)


def from_backbone(backbone: vit.VisionTransformer, **kwargs) -> MaskedPatchPredictor:
  """The MaskedPatchPredictor with `backbone`'s attributes (and kwargs' own)."""
  fields = {f.name: getattr(backbone, f.name) for f in dataclasses.fields(backbone)
            if f.name not in ("parent", "name")}
  return MaskedPatchPredictor(**{**fields, **kwargs})
