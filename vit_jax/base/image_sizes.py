"""What an image size may be (a side, or a (height, width) pair of whole pixels), read in one
place for the checkpoints, the input stacks and the commands alike."""

import numbers
from typing import List, Sequence, Tuple, Union

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


def size_text(height: int, width: int) -> str:
  """'224' for a square, '224x448' otherwise: how messages write a size."""
  return str(height) if height == width else f"{height}x{width}"


def nearest_multiples(height: int, width: int, steps: Tuple[int, int],
                      largest: int) -> List[str]:
  """The sizes nearest to height x width whose sides are whole multiples of steps (per
  side): rounded down, then up; none below one step or above `largest` px a side. What a
  refusal of the size offers instead."""
  down = [side // step * step for side, step in zip((height, width), steps)]
  up = [-(-side // step) * step for side, step in zip((height, width), steps)]
  found = []
  for sides in (down, up):
    text = size_text(*sides)
    if min(sides) > 0 and max(sides) <= largest and text not in found:
      found.append(text)
  return found
