"""What two-tower models embed and score: zero-shot class embeddings (prompt templates
averaged), image files embedded in batches, zero-shot scores (what zeroshot and predict
--classes share, through families/two_tower/zero_shot.py).

Class embeddings are computed once per run (big_vision's and CLIP's recipe: each class's
prompts embedded, averaged, normalised again).
"""

import functools
import sys
from typing import Callable, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import tqdm

from vit_jax.base import errors
from vit_jax.data import image_files
from vit_jax.families.two_tower import model as two_tower
from vit_jax.families.vit import naflex_model as vit_naflex_model

TEXT_BATCH = 64


@functools.lru_cache(maxsize=8)
def _jitted(model: two_tower.TwoTower, method: str) -> Callable:
  """(params, inputs) -> model.<method>, compiled once per model and shape: an evaluator
  of a training run embeds every few hundred steps."""
  return jax.jit(lambda p, x: model.apply({"params": p}, x, method=method))


def embed_texts(model: two_tower.TwoTower, params, tokens: np.ndarray) -> np.ndarray:
  """Normalised text embeddings [N, D] of token rows, in batches of one compiled shape."""
  fn = _jitted(model, "embed_texts")
  out = []
  for start in range(0, len(tokens), TEXT_BATCH):
    chunk = tokens[start:start + TEXT_BATCH]
    padded = np.concatenate([chunk, np.repeat(chunk[-1:], TEXT_BATCH - len(chunk), axis=0)])
    out.append(np.asarray(fn(params, padded))[:len(chunk)])
  return np.concatenate(out)


def class_embeddings(model: two_tower.TwoTower, params, tokenize: Callable,
                     names: Sequence[str], templates: Sequence[str]) -> np.ndarray:
  """[classes, D]: per class, its templates filled with its name, embedded, averaged and
  normalised."""
  texts = [t.format(n) for n in names for t in templates]
  z = embed_texts(model, params, tokenize(texts)).reshape(len(names), len(templates), -1)
  return np.asarray(two_tower.normalize(z.mean(axis=1)))


def _embed_in_batches(paths: Sequence[str], batch_size: int, load, embed) -> np.ndarray:
  """embed(*stacked load(path) parts) in batches of one compiled shape (the last padded
  with its last image), with a progress bar when there is more than one batch."""
  rows = []
  for start in tqdm.tqdm(range(0, len(paths), batch_size), desc="images", unit="batch",
                         disable=len(paths) <= batch_size, file=sys.stderr):
    chunk = paths[start:start + batch_size]
    items = [load(p) for p in chunk]  # names a bad one
    items += [items[-1]] * (batch_size - len(chunk))
    rows.append(np.asarray(embed(*(np.stack(part) for part in zip(*items))))[:len(chunk)])
  return np.concatenate(rows)


def embed_image_files(model: two_tower.TwoTower, params, paths: Sequence[str],
                      image_size: int, batch_size: int) -> np.ndarray:
  """Normalised image embeddings [images, D], each image squashed to image_size."""
  embed = _jitted(model, "embed_images")
  return _embed_in_batches(paths, batch_size,
                           lambda path: (image_files.load_image(path, image_size),),
                           lambda x: embed(params, x))


def embed_naflex_files(model: two_tower.TwoTower, params, paths: Sequence[str],
                       max_patches: int, grid: int, batch_size: int) -> np.ndarray:
  """Normalised image embeddings [images, D] read as SigLIP 2's NaFlex models were trained:
  each image at its own aspect ratio in at most max_patches patches, padding masked, the
  image tower's grid x grid position table resized per image (vit_jax.families.vit.naflex_model)."""
  tower = vit_naflex_model.from_vit(model.img, grid)
  embed = jax.jit(lambda p, *inputs: two_tower.normalize(tower.apply({"params": p}, *inputs)))
  return _embed_in_batches(
      paths, batch_size,
      lambda path: image_files.load_naflex(path, model.img.patch_size, max_patches),
      lambda *inputs: embed(params["img"], *inputs))


def image_embedder(model: two_tower.TwoTower, params, native_size: Optional[int],
                   image_size: int, max_patches: Optional[int], batch_size: int):
  """paths -> normalised image embeddings: squashed to image_size, or NaFlex's reading with
  max_patches (which needs the tower's own square position table: native_size)."""
  if not max_patches:
    return lambda paths: embed_image_files(model, params, paths, image_size, batch_size)
  if not native_size:
    raise errors.InvalidInput("max_patches reads each image at its own size (NaFlex): pass "
                              "a model with a learned square position table (SigLIP 2)")
  grid = native_size // model.img.patch_size
  return lambda paths: embed_naflex_files(model, params, paths, max_patches, grid,
                                          batch_size)


def read_scores(model: two_tower.TwoTower, params, zimg, zcls) -> np.ndarray:
  """[images, classes] as the model's family reads them (LiT softmax, SigLIP sigmoid)."""
  logits = model.apply({"params": params}, jnp.asarray(zimg), jnp.asarray(zcls),
                       method=model.logits)
  return np.asarray(two_tower.scores(logits, model.family))
