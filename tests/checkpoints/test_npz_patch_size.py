"""Another patch size at load: load_npz(patch_size=), convert --patch_size (FlexiViT PI-resize
of the kernel, position embedding to the new grid at the file's image size)."""

import jax
import numpy as np
import pytest

from helpers import demo_config
from interop_files import IMAGE, images, tiny_file
from vit_jax import CheckpointError, load_npz
from vit_jax.checkpoints import format_conversion, npz_archive
from vit_jax.families.vit import npz_file as vit_npz_file
from vit_jax.models import patch_resize, posemb
from vit_jax.training import objectives


@pytest.fixture(name="tiny", scope="module")
def fixture_tiny(tmp_path_factory):
  return tiny_file(tmp_path_factory.mktemp("tiny"))  # patch 4 at 16 px: a 4x4 grid


@pytest.mark.parametrize("patch_size,grid", [(8, 2), (2, 8)])
def test_kernel_is_pi_resized_and_posemb_goes_to_the_new_grid(tiny, patch_size, grid):
  file = npz_archive.read_npz(tiny)
  module, params = load_npz(tiny, patch_size=patch_size)
  assert module.patch_size == patch_size
  np.testing.assert_array_equal(params["embedding"]["kernel"], patch_resize.pi_resize_kernel(
      file[vit_npz_file.KERNEL_KEY], patch_size))
  np.testing.assert_array_equal(
      params["Transformer"]["posembed_input"]["pos_embedding"],
      posemb.resize_posemb(file[vit_npz_file.POSEMB_KEY], (grid, grid), True))
  assert np.isfinite(jax.jit(module.apply)({"params": params}, images())).all()


def test_the_file_patch_size_changes_nothing_and_image_size_still_applies(tiny):
  _, same = load_npz(tiny, patch_size=4)
  _, plain = load_npz(tiny)
  for a, b in zip(jax.tree.leaves(same), jax.tree.leaves(plain)):
    np.testing.assert_array_equal(a, b)
  _, larger = load_npz(tiny, patch_size=8, image_size=32)
  assert larger["Transformer"]["posembed_input"]["pos_embedding"].shape == (1, 1 + 16, 32)


def test_convert_writes_what_load_npz_loads(tiny, tmp_path):
  format_conversion.convert(tiny, tmp_path / "p8.npz", patch_size=8)
  module, params = load_npz(tmp_path / "p8.npz")
  _, expected = load_npz(tiny, patch_size=8)
  assert module.patch_size == 8
  np.testing.assert_array_equal(module.apply({"params": params}, images()),
                                module.apply({"params": expected}, images()))


def test_hybrids_refuse_in_one_line(tmp_path):
  hybrid = tiny_file(tmp_path, patch_size=1, resnet_stages=())
  with pytest.raises(CheckpointError, match="hybrid .* cannot be changed") as excinfo:
    load_npz(hybrid, patch_size=2, image_size=IMAGE)
  assert "\n" not in str(excinfo.value)


def test_config_model_patch_size_fine_tunes_at_another_size(tiny):
  """config.model.patch_size with config.pretrained: the classification objective loads
  the file PI-resized, its table at pp.crop (16 px) / 8 = 2x2."""
  config = demo_config(pretrained=str(tiny))
  config.model.update(hidden_size=32, mlp_dim=64, num_heads=2, num_layers=2, patch_size=8)
  module, params = objectives.get(config).create_model(config, 10, load_pretrained=True)
  assert module.patch_size == 8 and params["embedding"]["kernel"].shape == (8, 8, 3, 32)
  assert params["Transformer"]["posembed_input"]["pos_embedding"].shape == (1, 5, 32)
  np.testing.assert_array_equal(params["embedding"]["kernel"], load_npz(
      tiny, patch_size=8)[1]["embedding"]["kernel"])
