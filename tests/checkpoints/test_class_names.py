"""Class names carried in a params.npz: round trips, and invisible to every array reader."""

import os
import zipfile

import numpy as np
import optax
import pytest

from conftest import init_params, tiny_model
from vit_jax import load_npz, read_class_names, save_npz
from vit_jax.checkpoints import class_names

# Accents, CJK, emoji, a name that looks like a flag, and one with an undecodable byte
# (os.listdir's surrogate escape): every folder name a filesystem allows.
NAMES = ["café", "猫 cat", "🐶", "--flag", "bad\udcff"]


@pytest.fixture(scope="module", name="params")
def fixture_params():
  return init_params(tiny_model(num_classes=len(NAMES)))


def arrays(path):
  """What np.load-based readers see (ours, timm's, the original vision_transformer's
  checkpoint.load: np.load(f, allow_pickle=False).items())."""
  with np.load(path, allow_pickle=False) as archive:
    return dict(archive.items())


def test_names_round_trip_and_readers_see_the_same_arrays(params, tmp_path):
  save_npz(params, tmp_path / "plain.npz")
  save_npz(params, tmp_path / "named.npz", class_names=NAMES)
  assert read_class_names(tmp_path / "named.npz") == NAMES
  assert read_class_names(os.fsencode(tmp_path / "named.npz")) == NAMES  # a bytes path too
  assert read_class_names(tmp_path / "plain.npz") is None
  plain, named = arrays(tmp_path / "plain.npz"), arrays(tmp_path / "named.npz")
  assert plain.keys() == named.keys()
  assert all(np.array_equal(plain[key], named[key]) for key in plain)
  optax.sgd(0.1, momentum=0.9).init(named)  # the original fine-tunes what load returns
  module, _ = load_npz(tmp_path / "named.npz")
  assert module.num_classes == len(NAMES)
  assert not (tmp_path / "named.npz.classes.json").exists()


def test_a_list_too_long_for_the_comment_goes_beside_the_file(tmp_path):
  many = [f"class number {i:05d} with a long descriptive name" for i in range(2000)]
  params = init_params(tiny_model(num_classes=len(many)))
  path = tmp_path / "params.npz"
  save_npz(params, path, class_names=many)
  assert zipfile.ZipFile(path).comment == b""
  assert read_class_names(path) == many
  save_npz(params, path, class_names=many[:1000] + ["short"] * 1000)  # fits: no stale sidecar
  assert not (tmp_path / ("params.npz" + class_names.SIDECAR_SUFFIX)).exists()
  assert read_class_names(path)[-1] == "short"


def test_the_multi_label_flag_travels_with_the_names(params, tmp_path):
  save_npz(params, tmp_path / "multi.npz", class_names=NAMES, multi_label=True)
  save_npz(params, tmp_path / "single.npz", class_names=NAMES)
  assert read_class_names(tmp_path / "multi.npz") == NAMES
  assert class_names.read_multi_label(tmp_path / "multi.npz")
  assert not class_names.read_multi_label(tmp_path / "single.npz")
  assert arrays(tmp_path / "multi.npz").keys() == arrays(tmp_path / "single.npz").keys()


def test_names_must_match_the_head(params, tmp_path):
  with pytest.raises(ValueError, match="4 class names for a head of 5 classes"):
    save_npz(params, tmp_path / "p.npz", class_names=NAMES[:4])
  assert not (tmp_path / "p.npz").exists()


def test_foreign_comments_and_files(released_fixtures, tmp_path):
  assert read_class_names(released_fixtures / "vit-ti16.npz") is None
  other = tmp_path / "other.npz"
  np.savez(other, x=np.zeros(2))
  with zipfile.ZipFile(other, "a") as archive:
    archive.comment = b"written by another tool"
  assert read_class_names(other) is None
  (tmp_path / "text.npz").write_text("not a zip")
  with pytest.raises(ValueError, match="not a valid .npz"):
    read_class_names(tmp_path / "text.npz")
  with pytest.raises(FileNotFoundError):
    read_class_names(tmp_path / "missing.npz")


def test_converting_to_npz_keeps_the_names_and_the_multi_label_flag(params, tmp_path):
  from vit_jax.checkpoints import format_conversion  # pylint: disable=import-outside-toplevel
  save_npz(params, tmp_path / "multi.npz", class_names=NAMES, multi_label=True)
  format_conversion.convert(tmp_path / "multi.npz", tmp_path / "copy.npz")
  assert read_class_names(tmp_path / "copy.npz") == NAMES
  assert class_names.read_multi_label(tmp_path / "copy.npz")


def test_a_naflex_budget_travels_in_the_file_and_its_copies(params, tmp_path):
  """config.pp.max_patches rides in the same comment: with or without names, invisible to
  np.load readers, kept by a plain copy of the file."""
  import shutil  # pylint: disable=import-outside-toplevel
  save_npz(params, tmp_path / "plain.npz")
  save_npz(params, tmp_path / "budget.npz", max_patches=256)
  save_npz(params, tmp_path / "both.npz", class_names=NAMES, max_patches=9)
  shutil.copy(tmp_path / "budget.npz", tmp_path / "copy.npz")
  assert class_names.read_max_patches(tmp_path / "copy.npz") == 256
  assert class_names.read_class_names(tmp_path / "copy.npz") is None
  assert class_names.read_max_patches(tmp_path / "both.npz") == 9
  assert read_class_names(tmp_path / "both.npz") == NAMES
  assert class_names.read_max_patches(tmp_path / "plain.npz") is None
  plain, budget = arrays(tmp_path / "plain.npz"), arrays(tmp_path / "budget.npz")
  assert plain.keys() == budget.keys()
  assert all(np.array_equal(plain[key], budget[key]) for key in plain)
  assert load_npz(tmp_path / "budget.npz")[0].num_classes == len(NAMES)
  with pytest.raises(ValueError, match="max_patches=0: pass the NaFlex patch budget"):
    save_npz(params, tmp_path / "zero.npz", max_patches=0)
