"""metadata.json names the classes (a run's own, or ImageNet-1k's offline), the source
checkpoint's sha256 and the preprocessing contract."""

import hashlib

from conftest import random_params, tiny_model
from export_cases import read_metadata
from vit_jax import export
from vit_jax.checkpoints import npz


def exported_metadata(tmp_path, num_classes, class_names=None, multi_label=False):
  module = tiny_model(num_classes=num_classes, classifier="gap")
  path = tmp_path / "params.npz"
  npz.save_npz(random_params(module, image_size=16), str(path), class_names=class_names,
               multi_label=multi_label)
  export.export(str(path), str(tmp_path / "out"), to="stablehlo", log=lambda _: None)
  return path, read_metadata(tmp_path / "out")


def test_a_runs_class_names_and_the_checkpoint_hash(tmp_path):
  path, meta = exported_metadata(tmp_path, 3, ["café", "猫 cat", "dog"])
  assert meta["classes"] == ["café", "猫 cat", "dog"]
  assert meta["source_checkpoint"]["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
  assert meta["image_size"] == [16, 16] and meta["num_classes"] == 3
  assert meta["checkpoint_image_size"] == [16, 16]
  assert meta["preprocessing"]["in_graph"] is False
  assert "bilinear resize to 16x16" in " ".join(meta["preprocessing"]["steps"])
  assert meta["model"].endswith("(gap)")
  assert (meta["multi_label"], meta["probabilities"]) == (False, "softmax")


def test_a_multi_label_run_exports_sigmoid_probabilities(tmp_path):
  _, meta = exported_metadata(tmp_path, 3, ["sky", "tree", "road"], multi_label=True)
  assert (meta["multi_label"], meta["probabilities"]) == (True, "sigmoid")


def test_imagenet_heads_get_the_wordnet_ids_offline(tmp_path):
  _, meta = exported_metadata(tmp_path, 1000)
  assert len(meta["classes"]) == 1000
  assert meta["classes"][:2] == ["n01440764", "n01443537"]  # tench, goldfish
  assert "WordNet" in meta["classes_from"]
