"""two_tower_open: a two-tower file told from a classifier's by its names alone (.npz,
Hugging Face folder, released name), and opened with its tokenizer."""

import json

import numpy as np

import two_tower_helpers
from conftest import random_params, tiny_model
from vit_jax import save_npz
from vit_jax.base import storage
from vit_jax.data import text_tokens
from vit_jax.families.two_tower import opening


def test_two_tower_files_folders_and_names_are_told_apart(tmp_path):
  path, model, _ = two_tower_helpers.save_tiny_lit(tmp_path)
  classifier = str(tmp_path / "vit.npz")
  save_npz(random_params(tiny_model(num_classes=3), 16), classifier)
  (tmp_path / "broken.npz").write_bytes(b"not a zip")
  for kind, config in (("siglip", tmp_path / "siglip"), ("vit", tmp_path / "hf_vit")):
    config.mkdir()
    (config / "config.json").write_text(json.dumps({"model_type": kind}))
  assert opening.claims(path)
  assert opening.claims("SigLIP2-B_16-224")  # a released name, not fetched
  assert opening.claims(str(tmp_path / "siglip"))
  for other in (classifier, str(tmp_path / "broken.npz"), str(tmp_path / "hf_vit"),
                str(tmp_path / "missing.npz"), "ViT-B_16"):
    assert not opening.claims(other), other
  loaded, params, info, tokenize = opening.open_two_tower(path)
  assert loaded == model and info.family == "lit"
  assert isinstance(tokenize, text_tokens.BertTokenizer)
  assert np.asarray(tokenize(["a cat"])).shape == (1, 16)
  assert opening.image_size(info) == 32 and opening.image_size(info, 48) == 48
  assert set(params) == {"img", "txt", "t"}


def test_a_remote_file_is_told_apart_from_its_zip_directory(gcs, tmp_path):
  path, _, _ = two_tower_helpers.save_tiny_lit(tmp_path)
  classifier = str(tmp_path / "vit.npz")
  save_npz(random_params(tiny_model(num_classes=3), 16), classifier)
  for name, local in (("lit.npz", path), ("vit.npz", classifier)):
    storage.write_atomic(f"gs://{gcs.bucket}/{name}", open(local, "rb").read())
  assert opening.claims(f"gs://{gcs.bucket}/lit.npz")
  assert not opening.claims(f"gs://{gcs.bucket}/vit.npz")
  assert not opening.claims(f"gs://{gcs.bucket}/missing.npz")
