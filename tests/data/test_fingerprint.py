"""What a split's fingerprint detects: labels exchanged in labels.csv, an image rewritten
with the same size (its modification time), records kept before times were, and captions
changed."""

import os

import numpy as np
from PIL import Image

from helpers import make_config, write_image
from vit_jax.data import captions, fingerprint
from vit_jax.data.sources import digits, multilabel_folder
from vit_jax.data.sources.image_folder import directory_source


def write_tags(root, rows):
  for i in range(3):
    for split in ("train", "test"):
      if not (root / split / f"{i}.png").exists():
        write_image(root / split / f"{i}.png", size=(20, 20))
  for split in ("train", "test"):
    (root / split / "labels.csv").write_text("path,labels\n" + "".join(
        f"{i}.png,{labels}\n" for i, labels in enumerate(rows)))


def train_fingerprint(root):
  return fingerprint.of_split(multilabel_folder.multilabel_source(str(root))[0])


def test_labels_exchanged_in_labels_csv_change_the_fingerprint(tmp_path):
  write_tags(tmp_path, ["sky", "tree", "sky;tree"])
  old = train_fingerprint(tmp_path)
  assert old["labels"] == {"train/0.png": "0", "train/1.png": "1", "train/2.png": "0;1"}
  assert not fingerprint.changed(old, train_fingerprint(tmp_path))
  write_tags(tmp_path, ["tree", "sky", "sky;tree"])  # same classes, files and counts
  new = train_fingerprint(tmp_path)
  assert fingerprint.changed(old, new) and not fingerprint.labels_kept(old, new)
  assert fingerprint.describe_change(old, new) == (
      "files 2 relabelled in labels.csv (train/0.png, train/1.png)")
  # a record from before labels were kept cannot tell: no false alarm
  assert not fingerprint.changed({k: v for k, v in old.items() if k != "labels"}, new)


def open_train(root):
  return fingerprint.of_split(directory_source(str(root))[0])


def test_an_image_rewritten_with_the_same_size_reads_as_replaced(tmp_path):
  for name in ("a", "b"):
    write_image(tmp_path / "train" / name / "1.png", size=(20, 20))
    write_image(tmp_path / "test" / name / "1.png", size=(20, 20))
  path = tmp_path / "train" / "a" / "1.png"  # stored uncompressed: other pixels, same size
  Image.fromarray(np.zeros((20, 20, 3), np.uint8)).save(path, compress_level=0)
  old = open_train(tmp_path)
  stat = path.stat()
  before = path.read_bytes()
  Image.fromarray(np.full((20, 20, 3), 255, np.uint8)).save(path, compress_level=0)
  assert len(before) == path.stat().st_size and before != path.read_bytes()
  os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
  new = open_train(tmp_path)
  assert fingerprint.changed(old, new) and fingerprint.labels_kept(old, new)
  assert fingerprint.describe_change(old, new) == "files 1 replaced (a/1.png)"
  write_image(tmp_path / "train" / "a" / "x.png", size=(20, 20))
  old = open_train(tmp_path)
  os.rename(tmp_path / "train" / "a" / "x.png", tmp_path / "train" / "b" / "x.png")
  assert fingerprint.describe_change(old, open_train(tmp_path)) == (
      "files 1 relabelled (a/x.png -> b/)")  # a move keeps size and time


def test_a_record_of_sizes_only_compares_sizes():
  old = {"kind": "files", "sha256": "x", "files": {"a/1.png": 5, "a/2.png": 6}}
  new = {"kind": "files", "sha256": "y", "files": {"a/1.png": [5, 123], "a/2.png": [7, 9]}}
  assert fingerprint.describe_change(old, new) == "files 1 replaced (a/2.png)"
  new["files"]["a/2.png"] = [6, 1]
  assert not fingerprint.changed(old, new)


def test_a_naflex_budget_is_part_of_the_fingerprint(tmp_path):
  write_image(tmp_path / "train/a/0.png")
  write_image(tmp_path / "test/a/1.png")
  plain = fingerprint.of_split(directory_source(str(tmp_path))[0])
  assert fingerprint.with_budget(plain, None) == plain  # square-crop records unchanged
  at_256, at_576 = (fingerprint.with_budget(plain, n) for n in (256, 576))
  assert not fingerprint.changed(at_256, fingerprint.with_budget(plain, 256))
  for old, new, told in ((at_256, at_576, "max_patches 256 -> 576"),
                         (plain, at_256, "max_patches None -> 256")):
    assert fingerprint.changed(old, new) and not fingerprint.labels_kept(old, new)
    assert fingerprint.describe_change(old, new) == told
  write_image(tmp_path / "train/a/2.png")
  grown = fingerprint.with_budget(fingerprint.of_split(directory_source(str(tmp_path))[0]), 576)
  assert fingerprint.describe_change(at_256, grown) == (
      "max_patches 256 -> 576; files 1 added (a/2.png)")


def test_captions_made_from_other_templates_are_a_data_change():
  opened = digits.digits_source()
  plain = fingerprint.of_split(opened[0])
  def with_templates(*templates):
    config = make_config("digits")
    config.objective, config.captions = "contrastive", {"templates": templates,
                                                        "class_names": None}
    return fingerprint.of_split(captions.attach(config, opened)[0])
  old, new = with_templates("a {}"), with_templates("a {}", "the digit {}")
  assert old["sha256"] == plain["sha256"] and not fingerprint.changed(old, with_templates("a {}"))
  assert fingerprint.changed(old, new) and fingerprint.describe_change(old, new) == (
      "captions changed")
  assert fingerprint.describe_change(plain, new) == "captions added"
  budget = fingerprint.with_budget(new, 64)
  assert fingerprint.describe_change(old, budget) == "max_patches None -> 64; captions changed"
