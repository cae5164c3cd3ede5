"""A captions file as a source: its images with their captions, found by name, its eval
file beside it, and every bad line or image one line naming the file and line number."""

import os

import numpy as np
import pytest

from helpers import make_config, write_image
from vit_jax.base import errors
from vit_jax.data import fingerprint
from vit_jax.data.sources import captions_file, registry
from vit_jax.data.splits import CorruptImageError


def write_captions(root, lines, name="train.tsv"):
  for image, _ in lines:
    if not (root / image).exists():
      write_image(str(root / image))
  (root / name).write_text("".join(f"{image}\t{text}\n" for image, text in lines))
  return str(root / name)


LINES = [("img/a.png", "a cat"), ("img/b.png", "a dog"), ("img/a.png", " a small cat "),
         ("img/c.jpg.png", "a bird")]


def config_of(dataset, eval_split="val.tsv"):
  config = make_config(dataset)
  config.eval_split, config.objective = eval_split, "contrastive"
  return config


def test_images_with_their_captions_and_no_classes(tmp_path):
  path = write_captions(tmp_path, LINES)
  write_captions(tmp_path, [("img/b.png", "a brown dog")], "val.tsv")
  for name in (path, f"captions:{path}"):
    source = registry.find(config_of(name))
    assert source is captions_file.SOURCE and source.class_count(config_of(name)) == 0
    train, evaluation, classes = registry.open_source(config_of(name), loader="grain")
    assert classes == [] and len(train) == 3 and len(evaluation) == 1
    assert [os.fsdecode(p) for p in train.data] == [
        str(tmp_path / "img" / n) for n in ("a.png", "b.png", "c.jpg.png")]
    np.testing.assert_array_equal(train.labels, np.zeros(3, np.int32))
    assert train.captions.of(0) == ["a cat", "a small cat"] and train.captions.of(2) == ["a bird"]
    assert evaluation.captions.of(0) == ["a brown dog"]
  split, names = registry.open_eval_source(path, "ignored", make_config(), loader="tf")
  assert names == [] and split.captions.of(1) == ["a dog"]


def test_each_bad_line_or_image_is_one_line_naming_it(tmp_path):
  path = write_captions(tmp_path, LINES)
  with pytest.raises(errors.InvalidInput, match=r"train.tsv is a captions file: set "
                     r"config.eval_split to the captions file of held-out images"):
    registry.open_source(config_of(path, None), loader="tf")
  with pytest.raises(FileNotFoundError, match=r"captions file .*val.tsv does not exist"):
    registry.open_source(config_of(path), loader="tf")
  (tmp_path / "gone.tsv").write_text("a.png\tx\n")
  with pytest.raises(errors.InvalidInput, match=r"^.*gone.tsv:1: image .*a.png does not "
                     r"exist; fix the line or remove it$"):
    captions_file.captions_split(str(tmp_path / "gone.tsv"))
  (tmp_path / "img" / "bad.jpg").write_bytes(b"\xff\xd8\xff" + bytes(100))  # no end marker
  (tmp_path / "bad.tsv").write_text("img/a.png\tx\n\nimg/bad.jpg\ty\n")
  with pytest.raises(CorruptImageError, match=r"^.*bad.tsv:3: corrupt image .*bad.jpg: "
                                         r"truncated \(no end marker\)"):
    captions_file.captions_split(str(tmp_path / "bad.tsv"))
  (tmp_path / "tabless.tsv").write_text("img/a.png\tx\nimg/b.png a dog\n")
  with pytest.raises(errors.InvalidInput, match=r"tabless.tsv:2 is no 'IMAGE<TAB>CAPTION' "
                                                r"line$"):
    captions_file.captions_split(str(tmp_path / "tabless.tsv"))


def test_an_edited_caption_changes_the_fingerprint(tmp_path):
  path = write_captions(tmp_path, LINES)
  old = fingerprint.of_split(captions_file.captions_split(path))
  assert old["kind"] == "files" and old["captions"]
  write_captions(tmp_path, LINES[:-1] + [("img/c.jpg.png", "a blue bird")])
  new = fingerprint.of_split(captions_file.captions_split(path))
  assert new["files"] == old["files"] and fingerprint.changed(old, new)
  assert not fingerprint.labels_kept(old, new)
  assert fingerprint.describe_change(old, new) == "captions changed"
