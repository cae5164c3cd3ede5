"""How python -m vit_jax.benchmark times a two-tower model (the family contract's
BenchmarkParts part): the image tower's and the text tower's inference (normalised
embeddings) apart, a row each. A pair's train step is timed from its training config
(--config), not from a file; the weights are the file's (the timing does not depend on their
values)."""

import os
from typing import Optional

import jax.numpy as jnp
import numpy as np

from vit_jax.base import errors
from vit_jax.families.two_tower import names, npz_file, opening
from vit_jax.models import family_contract

timed = "its towers' inference"


def _local(checkpoint: str) -> str:
  """A .npz or folder as it is; a released name already downloaded as its local copy, one
  line if it is not (the towers' sizes are read from the file)."""
  if checkpoint not in names.NAMES or os.path.exists(checkpoint):
    return checkpoint
  local = names.local_path(checkpoint)
  if not os.path.exists(local):
    raise errors.InvalidInput(
        f"{checkpoint} is not downloaded and its towers' sizes are read from its file: "
        f"python -m vit_jax.download {checkpoint} first, or pass its .npz / folder")
  return local


def load(checkpoint: str, *, batch: int, image_size: Optional[int],
         dtype: str) -> family_contract.TimedModel:
  """The image tower at image_size (default: the file's) and the text tower at the file's
  text length, each on `batch` random inputs, computing in `dtype`."""
  model, params, info = npz_file.load_two_tower(_local(checkpoint))
  compute = jnp.dtype(dtype)
  model = model.clone(img=model.img.clone(dtype=compute), txt=model.txt.clone(dtype=compute))
  side = opening.image_size(info, image_size)
  rng = np.random.default_rng(0)
  images = rng.uniform(-1, 1, (batch, side, side, 3)).astype(np.float32)
  tokens = rng.integers(0, model.txt.vocab_size, (batch, info.text_length)).astype(np.int32)

  def inference(method):
    return lambda p, x: model.apply({"params": p}, x, method=method)

  return family_contract.TimedModel(info.family, (
      family_contract.TimedPart("image tower", side, inference(model.embed_images), params,
                                images),
      family_contract.TimedPart("text tower", info.text_length, inference(model.embed_texts),
                                params, tokens)))
