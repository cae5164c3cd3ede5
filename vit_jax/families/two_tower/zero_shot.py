"""A two-tower model as the family contract's ZeroShot part: opened from a name, .npz or
Hugging Face folder with its tokenizer (or a pair in training, read as its saved file will
be: for_params), it embeds images (squashed to a side, or NaFlex's reading) and texts, and
scores images against class embeddings as the model is meant to be read (LiT: a softmax
over the classes; SigLIP: a sigmoid per class)."""

import dataclasses
from typing import Callable, Optional, Sequence

import numpy as np
from flax import traverse_util

from vit_jax.families.two_tower import npz_file, opening, scoring
from vit_jax.families.two_tower import model as two_tower


@dataclasses.dataclass
class OpenedModel:
  """A loaded pair, ready to embed and score."""
  model: two_tower.TwoTower
  params: dict
  info: npz_file.TwoTowerInfo
  tokenize: Callable

  @property
  def sigmoid(self) -> bool:
    """Whether scores are independent sigmoids (else a softmax over the classes)."""
    return self.info.family == "siglip"

  @property
  def reading(self) -> str:
    """How scores are read, for what commands print: 'siglip: sigmoid per class'."""
    per = "sigmoid per class" if self.sigmoid else "softmax over the classes"
    return f"{self.info.family}: {per}"

  def image_side(self, requested: Optional[int] = None) -> int:
    """The side images are squashed to: requested, else the model's own, else 224."""
    return opening.image_size(self.info, requested)

  def patch_budget(self, image_size: Optional[int] = None,
                   max_patches: Optional[int] = None) -> Optional[int]:
    """The NaFlex budget images are read at (None: squashed squares): max_patches where
    given (0: squares), else squares where image_size is given, else the model's own
    reading (a SigLIP 2 NaFlex folder: its processor's budget)."""
    if max_patches is not None:
      return max_patches or None
    return None if image_size else self.info.max_patches

  def embed_images(self, paths: Sequence[str], *, image_size: Optional[int],
                   max_patches: Optional[int], batch_size: int) -> np.ndarray:
    """Normalised image embeddings [images, D], in batches of one compiled shape, read as
    patch_budget says."""
    return scoring.image_embedder(self.model, self.params, self.info.image_size,
                                  self.image_side(image_size),
                                  self.patch_budget(image_size, max_patches), batch_size)(paths)

  def embed_texts(self, texts: Sequence[str]) -> np.ndarray:
    """Normalised text embeddings [texts, D]."""
    return scoring.embed_texts(self.model, self.params, self.tokenize(texts))

  def class_embeddings(self, names: Sequence[str], templates: Sequence[str]) -> np.ndarray:
    """[classes, D]: each class's templates filled, embedded, averaged and normalised."""
    return scoring.class_embeddings(self.model, self.params, self.tokenize, names, templates)

  def scores(self, zimg: np.ndarray, zcls: np.ndarray) -> np.ndarray:
    """[images, classes] as the model is read."""
    return scoring.read_scores(self.model, self.params, zimg, zcls)


def open_model(checkpoint: str, *, tokenizer: Optional[str] = None,
               bert_heads: Optional[int] = None) -> OpenedModel:
  """The pair of a released name, .npz or folder; tokenizer defaults to the vocabulary
  file found beside the checkpoint."""
  return OpenedModel(*opening.open_two_tower(checkpoint, tokenizer=tokenizer,
                                             bert_heads=bert_heads))


def for_params(module: two_tower.TwoTower, params, *, tokenizer: str) -> OpenedModel:
  """A pair in training (its module and params, on devices) read as open_model reads the
  file save_two_tower writes of them: the same text length, tokenizer and reading, so that
  the image-text evaluators' numbers are python -m vit_jax.zeroshot's on that file;
  tokenizer: its vocabulary file."""
  info = npz_file.describe(module, traverse_util.flatten_dict(params, sep="/"), tokenizer)
  return OpenedModel(module, params, info, opening.tokenizer_of(info))
