"""Two-tower image-text models: LiT (Zhai et al. 2022) and SigLIP / SigLIP 2 (Zhai et al.
2023; Tschannen et al. 2025), with the released files' top-level names: `img` (this project's
VisionTransformer: LiT's class-token ViT, optionally with a `head`; SigLIP's ViT with learned
position embedding, no class token and a MAP head), `txt`
(vit_jax.families.two_tower.text_tower), `t` (the log of the logit scale) and, for SigLIP,
`b` (the logit bias).

Embeddings are L2-normalised (norm + 1e-8, as the references divide); the logits of image i
and text j are exp(t) * <zimg_i, ztxt_j> + b. LiT reads them with a softmax over the texts
(the classes), SigLIP with a sigmoid per pair (vit_jax.families.two_tower.model.scores).
"""

from typing import Optional

import flax.linen as nn
import jax.numpy as jnp

from vit_jax.base import errors

FAMILIES = ("lit", "siglip")


def normalize(z):
  """z / (|z| + 1e-8) along the last axis (big_vision's and models_lit's normalisation)."""
  return z / (jnp.linalg.norm(z, axis=-1, keepdims=True) + 1e-8)


class TwoTower(nn.Module):
  """An image tower `img` and a text tower `txt` embedding into one space.

  Attributes:
    img: a VisionTransformer; its `head` is the image out projection when image_head
      (LiT-B16B), else the pooled representation is the embedding (SigLIP, LiT-B16B_2).
    txt: a text tower returning [B, out] (its own `head` is the text out projection).
    image_head: see img.
    bias_init: None for LiT (no `b`); SigLIP's `b` starts at this value (-10 in training).
    temperature_init: exp(t) at init (LiT 1, SigLIP 10).
  """
  img: nn.Module
  txt: nn.Module
  image_head: bool = False
  bias_init: Optional[float] = None
  temperature_init: float = 1.0

  def setup(self):
    log_t = jnp.log(self.temperature_init)
    self.t = self.param("t", lambda _, shape: jnp.full(shape, log_t, jnp.float32), (1,))
    if self.bias_init is not None:
      self.b = self.param("b", lambda _, shape: jnp.full(shape, self.bias_init, jnp.float32),
                          (1,))

  @property
  def family(self) -> str:
    return "lit" if self.bias_init is None else "siglip"

  def embed_images(self, images):
    """Normalised image embeddings [B, D] (images float [B, H, W, 3] in [-1, 1])."""
    return normalize(self.img(images, representation=not self.image_head))

  def embed_texts(self, tokens):
    """Normalised text embeddings [B, D] (tokens int [B, L] from vit_jax.text)."""
    return normalize(self.txt(tokens))

  def logits(self, zimg, ztxt):
    """exp(t) * zimg @ ztxt.T (+ b): [images, texts]."""
    logits = jnp.exp(self.t[0]) * zimg @ ztxt.T
    return logits + self.b[0] if self.bias_init is not None else logits

  def __call__(self, images, tokens):
    """(zimg, ztxt, logits [images, texts])."""
    zimg, ztxt = self.embed_images(images), self.embed_texts(tokens)
    return zimg, ztxt, self.logits(zimg, ztxt)


def scores(logits, family: str):
  """What a zero-shot user reads: LiT softmax over the texts (last axis), SigLIP a sigmoid
  per (image, text) pair."""
  if family not in FAMILIES:
    raise errors.InvalidInput(f"family must be one of {', '.join(FAMILIES)}, got {family!r}")
  logits = jnp.asarray(logits, jnp.float32)
  return nn.softmax(logits, axis=-1) if family == "lit" else nn.sigmoid(logits)
