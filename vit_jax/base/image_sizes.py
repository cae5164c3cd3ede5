"""What an image size may be (a side, or a (height, width) pair of whole pixels), read in one
place for the checkpoints, the input stacks and the commands alike."""

import numbers
from typing import Sequence, Tuple, Union

from vit_jax.base import errors

ImageSize = Union[int, Sequence[int]]


class ImageSizeError(errors.InvalidInput):
  """An input size the model cannot run at; the message names valid sizes."""


def _is_side(value) -> bool:
  return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def side_pair(image_size: ImageSize) -> Tuple[int, int]:
  """(height, width) of an int or a pair of ints; anything else (the string '32', which
  unpacked as a pair) is one line."""
  if _is_side(image_size):
    return int(image_size), int(image_size)
  if (isinstance(image_size, (tuple, list)) and len(image_size) == 2
      and all(map(_is_side, image_size))):
    return int(image_size[0]), int(image_size[1])
  raise ImageSizeError(f"image_size={image_size!r} must be a whole number of pixels or a "
                       "(height, width) pair of them")
