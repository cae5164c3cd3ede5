"""load_two_tower / save_two_tower: big_vision-layout SigLIP and LiT files round-trip with
the geometry read off the arrays, and damaged or foreign files fail in one line."""

import jax
import numpy as np
import pytest

from torch_libraries import (  # noqa: F401  # pylint: disable=unused-import
    declare_missing_torchvision_ops, fixture_torch)
import two_tower_helpers
from vit_jax.checkpoints import npz
from vit_jax.families.two_tower import npz_layout
from vit_jax.families.two_tower import npz_file

IMAGES = np.random.default_rng(0).uniform(-1, 1, (2, 32, 32, 3)).astype(np.float32)


def _siglip():
  return two_tower_helpers.tiny_siglip(), 8


def _lit_bert():
  return two_tower_helpers.tiny_lit_bert(), 16


def _params(model, length):
  return two_tower_helpers.random_params(model, length)


@pytest.mark.parametrize("make", [_siglip, _lit_bert], ids=["siglip", "lit_bert"])
def test_saved_file_loads_the_same_model(tmp_path, make):
  model, length = make()
  params = _params(model, length)
  path = str(tmp_path / "model.npz")
  npz_file.save_two_tower(params, path)
  loaded, loaded_params, info = npz_file.load_two_tower(path, bert_heads=2)
  tokens = np.arange(3 * length).reshape(3, length).astype(np.int32) % 50
  np.testing.assert_array_equal(
      two_tower_helpers.logits(model, params, IMAGES, tokens),
      two_tower_helpers.logits(loaded, {"params": loaded_params}, IMAGES, tokens))
  assert info.family == model.family and info.text_length == length
  assert info.image_size == 32


def test_siglip_file_is_in_big_vision_layout(tmp_path):
  model, length = _siglip()
  params = _params(model, length)
  path = str(tmp_path / "siglip.npz")
  npz_file.save_two_tower(params, path)
  keys = set(np.load(path).keys())
  # big_vision's names: top-level posemb, scan-stacked Linen-numbered blocks.
  assert {"t", "b", "img/pos_embedding", "txt/pos_embedding", "txt/Embed_0/embedding",
          "img/Transformer/encoderblock/MultiHeadDotProductAttention_0/query/kernel",
          "txt/Encoder_0/encoderblock/MlpBlock_0/Dense_0/kernel"} <= keys
  assert np.load(path)["img/Transformer/encoderblock/LayerNorm_1/scale"].shape == (2, 16)
  # Under a params/ prefix (a big_vision training checkpoint) it reads the same.
  prefixed = str(tmp_path / "prefixed.npz")
  np.savez(prefixed, **{"params/" + k: v for k, v in np.load(path).items()})
  assert npz_file.load_two_tower(prefixed)[2].family == "siglip"


def test_bad_files_fail_in_one_line(tmp_path):
  model, length = _siglip()
  params = _params(model, length)
  path = str(tmp_path / "siglip.npz")
  npz_file.save_two_tower(params, path)
  arrays = dict(np.load(path))
  vit_only = str(tmp_path / "vit.npz")
  np.savez(vit_only, **{k[4:]: v for k, v in arrays.items() if k.startswith("img/")})
  with pytest.raises(npz.CheckpointError, match="not a two-tower") as e:
    npz_file.load_two_tower(vit_only)
  assert "\n" not in str(e.value)
  arrays["txt/head/bias"] = arrays["txt/head/bias"][:5]
  damaged = str(tmp_path / "damaged.npz")
  np.savez(damaged, **arrays)
  with pytest.raises(npz.CheckpointError, match="txt/head/bias has shape"):
    npz_file.load_two_tower(damaged)
  with pytest.raises(FileNotFoundError, match="not found"):
    npz_file.load_two_tower(str(tmp_path / "absent.npz"))


def test_lit_text_transformer_layout_is_released_numbering():
  flat = {"txt/Embed_0/embedding": np.zeros((5, 4)),
          "txt/Encoder_0/encoderblock_0/MlpBlock_3/Dense_0/kernel": np.zeros((4, 8)),
          "txt/Encoder_0/encoderblock/MlpBlock_0/Dense_1/kernel": np.zeros((1, 8, 4))}
  ours = npz_layout.to_ours({k: v for k, v in flat.items() if "encoderblock/" not in k})
  assert "txt/Encoder_0/encoderblock_0/MlpBlock_3/Dense_0/kernel" in ours
  stacked = npz_layout.to_ours({k: v for k, v in flat.items() if "_0/Mlp" not in k})
  assert "txt/Encoder_0/encoderblock_0/MlpBlock_3/Dense_1/kernel" in stacked


@pytest.fixture(name="hf_folder")
def fixture_hf_folder(tmp_path, torch):
  declare_missing_torchvision_ops(torch)
  transformers = pytest.importorskip("transformers")
  config = transformers.SiglipConfig(
      text_config=dict(vocab_size=50, hidden_size=16, intermediate_size=32,
                       num_hidden_layers=1, num_attention_heads=2, max_position_embeddings=8),
      vision_config=dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, image_size=32, patch_size=8))
  torch.manual_seed(0)
  model = transformers.SiglipModel(config).eval()
  with torch.no_grad():
    for p in model.parameters():
      p.normal_(0, 0.3)
  model.save_pretrained(tmp_path / "siglip-hf")
  return str(tmp_path / "siglip-hf"), model


def test_hugging_face_folder_loads_and_saves_as_big_vision(hf_folder, torch, tmp_path):
  folder, hf_model = hf_folder
  model, params, info = npz_file.load_two_tower(folder)
  assert (info.family, info.source, info.text_length, info.image_size) == ("siglip", "hf", 8, 32)
  tokens = np.random.default_rng(1).integers(0, 50, (3, 8)).astype(np.int32)
  logits = two_tower_helpers.logits(model, {"params": params}, IMAGES, tokens)
  with torch.no_grad():
    expected = hf_model(input_ids=torch.tensor(tokens, dtype=torch.long),
                        pixel_values=torch.tensor(IMAGES.transpose(0, 3, 1, 2))).logits_per_image
  np.testing.assert_allclose(logits, expected.numpy(), rtol=1e-5, atol=1e-5)
  # Converted to big_vision's layout and read back: the same model, bit for bit.
  npz_file.save_two_tower(params, str(tmp_path / "converted.npz"))
  again, again_params, _ = npz_file.load_two_tower(str(tmp_path / "converted.npz"))
  np.testing.assert_array_equal(
      two_tower_helpers.logits(again, {"params": again_params}, IMAGES, tokens), logits)


def test_a_vit_folder_is_refused_in_one_line(tmp_path):
  (tmp_path / "vit").mkdir()
  (tmp_path / "vit" / "config.json").write_text('{"model_type": "vit"}')
  from safetensors.numpy import save_file  # pylint: disable=import-outside-toplevel
  save_file({"x": np.zeros(2, np.float32)}, str(tmp_path / "vit" / "model.safetensors"))
  with pytest.raises(ValueError, match="not SigLIP"):
    npz_file.load_two_tower(str(tmp_path / "vit"))


def test_load_npz_reads_the_image_tower_as_features_or_points_to_zeroshot(tmp_path):
  import vit_jax  # pylint: disable=import-outside-toplevel
  model, length = _siglip()
  params = _params(model, length)
  path = str(tmp_path / "siglip.npz")
  npz_file.save_two_tower(params, path)
  module, vit_params = vit_jax.load_npz(path, num_classes=0)
  features = jax.jit(lambda p: module.apply(p, IMAGES, representation=True))(
      {"params": vit_params})
  expected = jax.jit(lambda p: model.apply(
      p, IMAGES, method=lambda m, x: m.img(x, representation=True)))(params)
  np.testing.assert_allclose(features, expected, rtol=1e-6, atol=1e-6)
  with pytest.raises(npz.CheckpointError, match="vit_jax.zeroshot") as e:
    vit_jax.load_npz(path)
  assert "\n" not in str(e.value)
