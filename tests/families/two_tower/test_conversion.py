"""python -m vit_jax.convert on two-tower models: an HF SigLIP folder -> big_vision .npz ->
SiglipModel folder that transformers loads with the same logits; LiT refuses hf."""

import numpy as np
import pytest

import two_tower_helpers
from torch_libraries import (  # noqa: F401  # pylint: disable=unused-import
    declare_missing_torchvision_ops, fixture_torch)
from vit_jax.checkpoints import format_conversion
from vit_jax.families.two_tower import npz_file
from vit_jax.families.two_tower import opening
from vit_jax.families.two_tower import model as two_tower

IMAGES = np.random.default_rng(0).uniform(-1, 1, (2, 32, 32, 3)).astype(np.float32)
TOKENS = np.random.default_rng(1).integers(0, 40, (3, 8)).astype(np.int32)


def _saved_siglip(path, text_head=True):
  model = two_tower_helpers.tiny_siglip(vocab_size=40)
  if not text_head:  # a pair trained on the text tower's own features
    model = model.clone(txt=model.txt.clone(num_classes=None))
  params = two_tower_helpers.random_params(model, 8)
  npz_file.save_two_tower(params, path)
  (path.parent / (path.stem + ".model")).write_bytes(b"not read here")
  return two_tower_helpers.logits(model, params, IMAGES, TOKENS)


@pytest.mark.parametrize("text_head", [True, False])
def test_npz_to_hf_folder_that_transformers_runs_and_back(tmp_path, torch, text_head):
  declare_missing_torchvision_ops(torch)
  transformers = pytest.importorskip("transformers")
  expected = _saved_siglip(tmp_path / "siglip.npz", text_head)
  assert opening.claims(str(tmp_path / "siglip.npz"))
  lines = format_conversion.convert(str(tmp_path / "siglip.npz"),
                                    str(tmp_path / "hf"), to="hf")
  assert lines[-1].endswith("(transformers SiglipModel folder)")
  assert (tmp_path / "hf" / "spiece.model").exists()  # the tokenizer travels along
  hf_model = transformers.SiglipModel.from_pretrained(str(tmp_path / "hf")).eval()
  with torch.no_grad():
    logits = hf_model(input_ids=torch.tensor(TOKENS, dtype=torch.long),
                      pixel_values=torch.tensor(IMAGES.transpose(0, 3, 1, 2))).logits_per_image
  np.testing.assert_allclose(logits.numpy(), expected, rtol=1e-5, atol=1e-5)
  assert opening.claims(str(tmp_path / "hf"))
  format_conversion.convert(str(tmp_path / "hf"), str(tmp_path / "back.npz"), to="npz")
  assert (tmp_path / "back.model").exists()
  again, params, _ = npz_file.load_two_tower(str(tmp_path / "back.npz"))
  np.testing.assert_array_equal(
      np.load(tmp_path / "back.npz")["img/pos_embedding"],
      np.load(tmp_path / "siglip.npz")["img/pos_embedding"])  # bit for bit
  back = two_tower_helpers.logits(again, {"params": params}, IMAGES, TOKENS)
  if text_head:  # the same program again
    np.testing.assert_array_equal(back, expected)
  else:  # with the identity head the folder was given
    np.testing.assert_allclose(back, expected, rtol=1e-6, atol=1e-6)


def test_lit_has_no_hf_form_and_vit_files_are_no_source(tmp_path):
  model = two_tower.TwoTower(two_tower_helpers.tiny_siglip().img,
                             two_tower_helpers.tiny_siglip().txt)  # LiT: no bias
  npz_file.save_two_tower(two_tower_helpers.random_params(model, 8),
                          str(tmp_path / "l.npz"))
  with pytest.raises(ValueError, match="LiT models stay .npz files"):
    format_conversion.convert(str(tmp_path / "l.npz"), str(tmp_path / "hf"), to="hf")
  assert not (tmp_path / "hf").exists()
  np.savez(tmp_path / "vit.npz", **{"embedding/kernel": np.zeros((8, 8, 3, 16), np.float32)})
  assert not opening.claims(str(tmp_path / "vit.npz"))
