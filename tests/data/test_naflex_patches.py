"""NaFlex preprocessing (vit_jax.data.naflex_patches) against transformers'
Siglip2ImageProcessorPil on odd-sized images: the same grids, patches, masks."""

import numpy as np
import pytest

from torch_libraries import (  # noqa: F401  # pylint: disable=unused-import
    declare_missing_torchvision_ops, fixture_torch)
from vit_jax.base import errors
from vit_jax.data import naflex_patches

SIZES = [(37, 101), (300, 20), (15, 15), (64, 64), (1, 200), (250, 333)]


@pytest.fixture(name="processor", scope="module")
def fixture_processor():
  torch = pytest.importorskip("torch")
  declare_missing_torchvision_ops(torch)
  module = pytest.importorskip("transformers.models.siglip2.image_processing_pil_siglip2")
  return module.Siglip2ImageProcessorPil


@pytest.mark.parametrize("patch,budget", [(8, 64), (16, 256), (14, 23)])
def test_patches_equal_siglip2_image_processor(processor, patch, budget):
  rng = np.random.default_rng(0)
  images = [rng.integers(0, 256, (h, w, 3), dtype=np.uint8) for h, w in SIZES]
  reference = processor(patch_size=patch, max_num_patches=budget)(
      images, return_tensors="np", input_data_format="channels_last")
  for i, image in enumerate(images):
    patches, mask, grid = naflex_patches.patchify(image, patch, budget)
    np.testing.assert_array_equal(grid, reference["spatial_shapes"][i], err_msg=str(SIZES[i]))
    np.testing.assert_array_equal(mask, reference["pixel_attention_mask"][i])
    np.testing.assert_allclose(patches, reference["pixel_values"][i], atol=1e-6)
    assert 0 < mask.sum() == grid[0] * grid[1] <= budget


def test_a_wrong_image_is_one_line():
  with pytest.raises(errors.InvalidInput, match="uint8 RGB"):
    naflex_patches.patchify(np.zeros((8, 8), np.uint8), 4, 16)


def test_a_budget_past_what_an_image_can_fill_only_pads():
  """Past its own pixels an image is upsampled to fill the budget (the reading changes);
  past its grid at the top scale (100 x each side) a budget only pads: sequence_length
  drops that padding and the real patches stay the same."""
  image = np.random.default_rng(1).integers(0, 256, (2, 3, 3), np.uint8)
  assert naflex_patches.most_patches(2, 3, 16) == 13 * 19
  assert naflex_patches.sequence_length([(2, 3), (1, 1)], 16, 10**9) == 13 * 19
  assert naflex_patches.sequence_length([(2, 3), (4000, 6000)], 16, 256) == 256
  assert naflex_patches.patchify(image, 16, 4)[1].sum() == 4  # upsampled to fill 4
  short = naflex_patches.patchify(image, 16, 10**9, length=13 * 19)
  padded = naflex_patches.patchify(image, 16, 1000)
  assert short[0].shape == (13 * 19, 768) and padded[1][13 * 19:].sum() == 0
  np.testing.assert_array_equal(short[0], padded[0][:13 * 19])
  np.testing.assert_array_equal(short[1], padded[1][:13 * 19])
  np.testing.assert_array_equal(short[2], padded[2])
