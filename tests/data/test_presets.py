"""vit_jax.data.presets: the settings both input stacks share."""

import pytest

from vit_jax.data import presets


def test_bit_resize_follows_the_hyperrule():
  assert (presets.bit_resize(128), presets.bit_resize(384)) == (160, 448)
  assert presets.bit_resize(16, 18) == 18
  with pytest.raises(ValueError, match="resize=12 is smaller than crop=16"):
    presets.bit_resize(16, 12)
