"""Images named on a command line (predict, visualize): the arguments checked before a slow
checkpoint load, and each file decoded and resized as evaluation preprocesses it, without
TensorFlow."""

import os
from typing import List, Sequence

import numpy as np

from vit_jax.base import cli, errors, storage


class ImageError(errors.InvalidInput):
  """An image that cannot be read or decoded; the message names the file."""


def _pil_message(error: Exception) -> str:
  return " ".join(str(error).split()) or type(error).__name__


def load_image(path: str, image_size) -> np.ndarray:
  """[height, width, 3] float32 in [-1, 1] for image_size (a side or (height, width)),
  preprocessed like evaluation (the same pixels as tf.data's: np_preprocess), without
  TensorFlow."""
  from vit_jax.data.grain_stack import (  # pylint: disable=import-outside-toplevel (PIL)
      np_preprocess)
  try:
    encoded = storage.read_bytes(path)
  except FileNotFoundError:
    raise ImageError(f"image not found: {path}") from None
  except OSError as e:
    raise ImageError(f"cannot read image {path}: {e.strerror or e}") from None
  try:
    return np_preprocess.eval_resize(np_preprocess.decode_image(encoded), image_size)
  except (OSError, ValueError, SyntaxError) as e:  # PIL: not an image, truncated
    raise ImageError(f"cannot read image {path}: {_pil_message(e)}") from None


def image_arguments(argv: Sequence[str]) -> List[str]:
  """The command's IMAGE arguments; a missing local file fails here, before the (slow)
  checkpoint load."""
  image_paths = list(argv[1:])
  if not image_paths:
    raise cli.UsageError("give one or more images")
  missing = [p for p in image_paths if not storage.is_url(p) and not os.path.exists(p)]
  if missing:
    raise ImageError(f"image not found: {missing[0]}")
  return image_paths
