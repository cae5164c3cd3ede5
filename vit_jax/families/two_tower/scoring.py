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
from vit_jax.data import image_files, naflex_patches
from vit_jax.families.two_tower import model as two_tower
from vit_jax.families.vit import naflex_model as vit_naflex_model
from vit_jax.models import memory_fit

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
  with its last image; none larger than the images), with a progress bar when there is
  more than one batch."""
  batch_size = max(1, min(batch_size, len(paths)))
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


class _NaFlexBatches:
  """NaFlex's programs of one tower and budget, one per padded length, each at the largest
  batch (up to the one asked) that fits the free memory (models.memory_fit)."""

  def __init__(self, tower, params, max_patches: int, batch_size: int):
    self.tower, self.params, self.max_patches = tower, params, max_patches
    self.batch_size, self.programs = batch_size, {}
    self.resident = sum(np.asarray(a).nbytes for a in jax.tree.leaves(params))

  def program(self, length: int, path: str) -> memory_fit.Fitted:
    """The program for sequences of `length` patches; one line when one image is too many."""
    if length not in self.programs:
      width = self.tower.patch_size ** 2 * 3
      itemsize = jnp.dtype(self.tower.dtype).itemsize
      forward = jax.jit(lambda p, *inputs: two_tower.normalize(
          self.tower.apply({"params": p}, *inputs)))
      compile_at = lambda b: forward.lower(
          self.params, jax.ShapeDtypeStruct((b, length, width), jnp.float32),
          jax.ShapeDtypeStruct((b, length), jnp.int32),
          jax.ShapeDtypeStruct((b, 2), jnp.int32)).compile()
      attention = lambda b: b * self.tower.num_heads * length * length * itemsize
      try:
        self.programs[length] = memory_fit.largest_batch(
            compile_at, self.batch_size, attention, resident=self.resident,
            what=f"{path} in {length} patches")
      except memory_fit.DoesNotFit as e:
        raise memory_fit.DoesNotFit(
            f"max_patches={self.max_patches}: {e}: read images in fewer patches (a smaller "
            "--max_patches; the NaFlex models were trained at 256 to 1024)", e.need,
            e.have) from None
      self.batch_size = self.programs[length].batch
    return self.programs[length]


def embed_naflex_files(model: two_tower.TwoTower, params, paths: Sequence[str],
                       max_patches: int, grid: int, batch_size: int) -> np.ndarray:
  """Normalised image embeddings [images, D] read as SigLIP 2's NaFlex models were trained:
  each image at its own aspect ratio in at most max_patches patches, padding masked, the
  image tower's grid x grid position table resized per image (vit_jax.families.vit.naflex_model).
  A batch holds at most the images there are and is padded only as far as its images can
  fill (naflex_patches.sequence_length); a budget that does not fit memory is refused."""
  patch = model.img.patch_size
  programs = _NaFlexBatches(vit_naflex_model.from_vit(model.img, grid), params["img"],
                            max_patches, max(1, min(batch_size, len(paths))))
  rows, start = [], 0
  with tqdm.tqdm(total=len(paths), desc="images", unit="image", file=sys.stderr,
                 disable=len(paths) <= programs.batch_size) as progress:
    while start < len(paths):
      chunk = paths[start:start + programs.batch_size]
      pixels = [image_files.read_pixels(p) for p in chunk]  # names a bad one
      sizes = [p.shape[:2] for p in pixels]
      length = naflex_patches.sequence_length(sizes, patch, max_patches)
      largest = max(range(len(sizes)), key=lambda i: naflex_patches.most_patches(
          *sizes[i], patch))
      fitted = programs.program(length, chunk[largest])
      chunk, pixels = chunk[:fitted.batch], pixels[:fitted.batch]
      items = [naflex_patches.patchify(p, patch, max_patches, length) for p in pixels]
      items += [items[-1]] * (fitted.batch - len(chunk))
      inputs = [np.stack(part) for part in zip(*items)]
      rows.append(np.asarray(fitted.compiled(params["img"], *inputs))[:len(chunk)])
      start += len(chunk)
      progress.update(len(chunk))
  return np.concatenate(rows)


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
