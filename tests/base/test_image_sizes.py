"""vit_jax.base.image_sizes: what an image_size may be, for every floor that reads one."""

import re

import numpy as np
import pytest

from vit_jax.base import errors, image_sizes


def test_an_image_size_is_an_int_or_a_pair_of_ints():
  assert image_sizes.side_pair(np.int64(32)) == (32, 32)
  assert image_sizes.side_pair([16, 8]) == (16, 8) and image_sizes.side_pair((3, 5)) == (3, 5)
  for wrong in ("32", (32,), 32.0, True):  # '32' was unpacked as the pair (3, 2)
    with pytest.raises(image_sizes.ImageSizeError, match=re.escape(
        f"image_size={wrong!r} must be a whole number of pixels or a (height, width) pair")):
      image_sizes.side_pair(wrong)
  assert issubclass(image_sizes.ImageSizeError, errors.InvalidInput)  # one error: line


def test_nearest_multiples_round_each_side_down_then_up_within_bounds():
  assert image_sizes.nearest_multiples(300, 300, (32, 32), 4096) == ["288", "320"]
  assert image_sizes.nearest_multiples(300, 500, (32, 32), 4096) == ["288x480", "320x512"]
  assert image_sizes.nearest_multiples(300, 224, (224, 224), 4096) == ["224", "448x224"]
  assert image_sizes.nearest_multiples(200, 200, (224, 224), 4096) == ["224"]  # not 0
  assert image_sizes.nearest_multiples(4100, 4100, (32, 32), 4096) == ["4096"]  # not 4128
  assert image_sizes.size_text(7, 7) == "7" and image_sizes.size_text(7, 14) == "7x14"
