"""MLP-Mixers through `convert` (vit_jax.families.mixer.timm_layout,
format_conversion.convert_mixer): to timm's MlpMixer, which computes our logits when told
the original's tanh GELU, at the file's size and at a resized one; timm files back to our
layout bit for bit; one line, and nothing written, for what has no faithful target."""

import functools
import os

import jax
import numpy as np
import pytest

from conftest import random_params
from torch_libraries import (  # noqa: F401  # pylint: disable=unused-import
    fixture_timm, fixture_torch)
from vit_jax import create_model, load_npz, read_class_names, save_npz
from vit_jax.checkpoints import format_conversion

IMAGE = 32  # Mixer-S/32, the smallest size timm registers: one patch (token mixing 1 -> 1)


@pytest.fixture(name="saved", scope="module")
def fixture_saved(tmp_path_factory):
  module = create_model("Mixer-S_32", num_classes=3)
  params = random_params(module, IMAGE)
  path = str(tmp_path_factory.mktemp("mixer") / "mixer.npz")
  save_npz(params, path, class_names=["a", "b", "c"])
  return path


def our_logits(path, images):
  module, params = load_npz(path, image_size=images.shape[1])
  return np.asarray(jax.jit(module.apply)({"params": params}, images))


def relative_error(a, b):
  return float(np.max(np.abs(a - b)) / np.max(np.abs(b)))


@pytest.mark.parametrize("image_size", [None, 2 * IMAGE])
def test_timm_computes_our_logits_told_the_tanh_gelu(saved, tmp_path, timm, torch, image_size):
  folder = str(tmp_path / "timm")
  lines = format_conversion.convert(saved, folder, to="timm", image_size=image_size)
  assert any("approximate='tanh'" in line for line in lines)
  side = image_size or IMAGE
  images = np.random.default_rng(0).uniform(-1, 1, (2, side, side, 3)).astype(np.float32)
  tanh_gelu = functools.partial(torch.nn.GELU, approximate="tanh")
  model = timm.create_model(f"local-dir:{folder}", pretrained=True, act_layer=tanh_gelu).eval()
  with torch.no_grad():
    theirs = model(torch.from_numpy(images.transpose(0, 3, 1, 2).copy())).numpy()
  assert relative_error(theirs, our_logits(saved, images)) <= 1e-5


def test_timm_files_come_back_bit_for_bit(saved, tmp_path):
  """npz -> timm .safetensors (numpy only) -> npz: every array identical; npz -> npz keeps
  the class names."""
  weights, back, copy = (str(tmp_path / name) for name in ("m.safetensors", "b.npz", "c.npz"))
  format_conversion.convert(saved, weights)
  format_conversion.convert(weights, back)
  format_conversion.convert(saved, copy)
  with np.load(saved) as original, np.load(back) as returned:
    assert set(original.files) == set(returned.files)
    for key in original.files:
      np.testing.assert_array_equal(returned[key], original[key])
  assert read_class_names(copy) == ["a", "b", "c"]


@pytest.mark.parametrize("dst, options, message", [
    ("hf", dict(to="hf"), "transformers has no Mixer"),
    ("out.npz", dict(pre_logits="drop"), "no pre_logits layer"),
    ("out.npz", dict(patch_size=8), "patch size cannot be changed"),
])
def test_what_has_no_faithful_target_is_one_line_and_writes_nothing(saved, tmp_path, dst,
                                                                    options, message):
  target = str(tmp_path / dst)
  with pytest.raises(format_conversion.ConversionError if "to" in options or
                     "pre_logits" in options else Exception, match=message) as raised:
    format_conversion.convert(saved, target, **options)
  assert "\n" not in str(raised.value)
  assert not os.path.exists(target)


def test_a_mixer_size_timm_does_not_register_is_one_line(tmp_path):
  module = create_model("Mixer-B_16", num_classes=2, patch_size=4, hidden_dim=16, num_blocks=2,
                        tokens_mlp_dim=8, channels_mlp_dim=32)
  path = str(tmp_path / "tiny.npz")
  save_npz(random_params(module, 16), path)
  with pytest.raises(format_conversion.ConversionError, match="timm registers Mixers S, B and L"):
    format_conversion.convert(path, str(tmp_path / "timm"), to="timm")
  assert not os.path.exists(tmp_path / "timm")
