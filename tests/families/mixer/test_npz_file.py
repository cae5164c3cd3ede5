"""MLP-Mixer files (vit_jax.families.mixer.npz_file through load_npz / save_npz): the released
layout written and read back bit for bit, the architecture read off the keys, a new head,
other image sizes through the token-mixing resize, and one line for what cannot load."""

import logging
import re

import jax
import numpy as np
import pytest

from conftest import random_params
from vit_jax import CheckpointError, create_model, load_npz, read_class_names, save_npz
from vit_jax.checkpoints import hub, npz
from vit_jax.families.mixer import model as mixer
from vit_jax.families.vit import npz_file as vit_npz_file

TINY = dict(patch_size=4, hidden_dim=16, num_blocks=2, tokens_mlp_dim=8, channels_mlp_dim=32)
IMAGE = 16


@pytest.fixture(name="saved", scope="module")
def fixture_saved(tmp_path_factory):
  module = create_model("Mixer-B_16", num_classes=3, **TINY)
  params = random_params(module, IMAGE)
  path = str(tmp_path_factory.mktemp("mixer") / "mixer.npz")
  save_npz(params, path, class_names=["a", "b", "c"])
  return module, params, path


def test_round_trip_is_bit_for_bit(saved):
  module, params, path = saved
  with np.load(path) as archive:
    keys = set(archive.files)
  assert "stem/kernel" in keys and "MixerBlock_1/token_mixing/Dense_1/bias" in keys
  assert len(keys) == 6 + 2 * 12
  loaded, loaded_params = load_npz(path)
  assert loaded == module
  assert jax.tree.all(jax.tree.map(np.array_equal, loaded_params, params))
  assert read_class_names(path) == ["a", "b", "c"]


def test_scan_layers_save_the_released_layout(saved, tmp_path):
  _, params, path = saved
  module, stacked = load_npz(path, scan_layers=True)
  assert module.scan_layers and "MixerBlock" in stacked
  save_npz(stacked, tmp_path / "again.npz")
  _, again = load_npz(str(tmp_path / "again.npz"))
  assert jax.tree.all(jax.tree.map(np.array_equal, again, params))


def test_new_head_and_model_name(saved):
  _, params, path = saved
  module, new = load_npz(path, num_classes=7, model_name="Mixer-B_16", dropout_rate=0.1,
                         attention_impl="xla", **TINY)  # the name's sizes, as overridden
  assert module.num_classes == 7 and module.dropout_rate == 0.1
  assert not new["head"]["kernel"].any() and new["head"]["kernel"].shape == (16, 7)
  assert np.array_equal(new["stem"]["kernel"], params["stem"]["kernel"])


def test_higher_resolution_resizes_the_token_mixing(saved):
  module, params, path = saved
  bigger, resized = load_npz(path, image_size=32)  # 4x4 -> 8x8 patches
  assert bigger.tokens_mlp_dim == 4 * module.tokens_mlp_dim
  assert resized["MixerBlock_0"]["token_mixing"]["Dense_0"]["kernel"].shape == (64, 32)
  tiles = np.random.default_rng(0).uniform(-1, 1, (4, IMAGE, IMAGE, 3)).astype(np.float32)
  image = tiles.reshape(2, 2, IMAGE, IMAGE, 3).transpose(0, 2, 1, 3, 4).reshape(1, 32, 32, 3)
  np.testing.assert_allclose(jax.jit(bigger.apply)({"params": resized}, image)[0],
                             jax.jit(module.apply)({"params": params}, tiles).mean(0),
                             rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kwargs, message", [
    (dict(model_name="Mixer-L_16"), r"not a Mixer-L_16: set them: --config.model.patch_size=4 "
                                    r"--config.model.hidden_dim=\d+ .*, or load it without a "
                                    r"model_name"),
    (dict(model_name="ViT-B_16"), r"holds an MLP-Mixer, not a ViT \(ViT-B_16\): set them: "),
    (dict(pre_logits=True), r"no pre_logits layer"),
    (dict(patch_size=8), r"patch size cannot be changed"),
])
def test_what_cannot_load_is_one_line(saved, kwargs, message):
  with pytest.raises(CheckpointError, match=message) as raised:
    load_npz(saved[2], **kwargs)
  assert "\n" not in str(raised.value)


@pytest.mark.parametrize("image_size, strict, grid, offered", [
    (24, False, "6x6", ["16", "32"]),  # 6x6 patches: no whole multiple of the file's 4x4
    (30, True, None, ["16", "32"]),  # 8x8 patches, but not a multiple of the stride (not 28)
    ((16, 40), False, "4x10", ["16x32", "16x48"]),
])
def test_a_size_the_token_mixing_cannot_take_offers_sizes_that_load(saved, image_size, strict,
                                                                    grid, offered):
  """The sizes offered are whole multiples of the file's grid in pixels: each loads, at the
  strictness predict and export load with (hub.load_for_inference)."""
  with pytest.raises(npz.ImageSizeError) as raised:
    load_npz(saved[2], image_size=image_size, strict_image_size=strict)
  message = str(raised.value)
  assert "\n" not in message and (grid is None or f"gives a {grid} token grid" in message)
  assert re.search(r"use (.*)$", message).group(1).split(" or ") == offered
  for size in offered:
    side = tuple(map(int, size.split("x"))) if "x" in size else int(size)
    assert hub.load_for_inference(saved[2], side)[2] == npz.side_pair(side)


def test_a_ragged_size_warns_of_padding_not_of_ignored_pixels(saved, caplog):
  """The stem pads SAME: 14 px give 4 patches whose last 2 px are zeros."""
  with caplog.at_level(logging.WARNING):
    module, _ = load_npz(saved[2], image_size=14)
  assert module.tokens_mlp_dim == saved[0].tokens_mlp_dim  # the file's 4x4 grid
  assert "4 x 4 tokens cover 16 x 16 pixels: 2 x 2 of them are zero padding" in caplog.text
  assert "ignored" not in caplog.text.replace("nothing is ignored", "")


def test_an_edited_array_is_the_one_named(saved, tmp_path):
  """Widths are read off most arrays: an edited stem is named, not the first block's
  intact LayerNorm that disagrees with it."""
  with np.load(saved[2]) as archive:
    arrays = dict(archive)
  arrays["stem/kernel"] = np.zeros((4, 4, 3, 24), np.float32)
  np.savez(tmp_path / "edited.npz", **arrays)
  with pytest.raises(CheckpointError, match=re.escape(
      "stem/kernel has shape (4, 4, 3, 24), the model expects (4, 4, 3, 16)")):
    load_npz(str(tmp_path / "edited.npz"))
  arrays["stem/kernel"] = np.zeros((4, 4, 3), np.float32)
  np.savez(tmp_path / "edited.npz", **arrays)
  with pytest.raises(CheckpointError, match=re.escape(
      "stem/kernel has shape (4, 4, 3), expected a (patch, patch, 3, hidden) kernel")):
    load_npz(str(tmp_path / "edited.npz"))


def test_vit_only_readers_refuse_a_mixer_in_one_line(saved):
  with pytest.raises(CheckpointError, match="is an MLP-Mixer checkpoint; this takes ViT"):
    vit_npz_file.read_checkpoint(saved[2])


def test_a_feature_extractor_saves_no_head(saved, tmp_path):
  _, params, path = saved
  module, features = load_npz(path, num_classes=0)
  assert "head" not in features and mixer.is_mixer_params(features)
  save_npz(features, tmp_path / "features.npz")
  with pytest.raises(CheckpointError, match="has no head: pass num_classes"):
    load_npz(str(tmp_path / "features.npz"))
  assert load_npz(str(tmp_path / "features.npz"), num_classes=2)[0].num_classes == 2


def test_native_image_size_is_the_token_mixing_grid(saved, tmp_path):
  """npz.native_image_size (which predict.classify and the notebook call) reads a Mixer's
  size off its token-mixing MLPs, also after loading at a larger size widened them."""
  module, params, path = saved
  assert npz.native_image_size(module, params) == IMAGE
  assert npz.native_image_size(*load_npz(path, image_size=2 * IMAGE)) == 2 * IMAGE
