"""WebDataset shards as a source: the names it takes, the split it opens (images and
captions by index, what cannot pair left out), its fingerprint, the loader it needs, and
the same split from gs:// (the Cloud Storage emulator)."""

import io
import logging

import numpy as np
import pytest
from PIL import Image

from helpers import make_config, train
from webdataset_shards import write_shards, write_tar
from vit_jax.base import errors, storage
from vit_jax.data import fingerprint, loaders, text_tokens
from vit_jax.data.sources import registry, webdataset

SAMPLES = [(f"{i:04d}", bytes([i]) * (100 + i), f"caption {i}") for i in range(6)]


def jpeg(value):
  encoded = io.BytesIO()
  Image.fromarray(np.full((12, 10, 3), value, np.uint8)).save(encoded, "JPEG")
  return encoded.getvalue()


def pair_config(dataset, **settings):
  """A config of image-text data (a contrastive objective)."""
  config = make_config(dataset)
  config.update(objective="contrastive", **settings)
  return config


def contents(split):
  return [(split.data[i], split.captions.of(i)) for i in range(len(split))]


EXPECTED = [(image, [text]) for _, image, text in SAMPLES]


@pytest.fixture(name="shards")
def fixture_shards(tmp_path):
  write_shards(str(tmp_path / "train"), SAMPLES)
  write_shards(str(tmp_path / "val"), SAMPLES[:2])
  return tmp_path


def test_the_names_it_takes(shards):
  for name in (f"webdataset:{shards}/train/{{00000..00001}}.tar", f"{shards}/train/00000.tar",
               str(shards / "train"), "gs://bucket/shards/{0..9}.tar"):
    assert registry.find(make_config(name)) is webdataset.SOURCE, name
  assert registry.find(make_config(str(shards))) is not webdataset.SOURCE  # no *.tar in it


def test_a_pattern_and_its_folder_open_the_same_samples_in_order(shards):
  by_pattern = webdataset.open_split(f"{shards}/train/{{00000..00001}}.tar")
  by_folder = webdataset.open_split(str(shards / "train"))
  assert contents(by_pattern) == contents(by_folder) == EXPECTED
  assert by_pattern.kind == "encoded" and by_pattern.labels.tolist() == [0] * 6
  config = pair_config(f"webdataset:{shards}/train", eval_split=str(shards / "val"))
  train, evaluation, names = registry.open_source(config, loader="grain")
  assert (len(train), len(evaluation), names) == (6, 2, [])


def test_grain_feeds_the_batches_of_the_same_samples_as_a_captions_file(tmp_path):
  """Shards read by index: the order, the crops and the caption each step draws are the
  captions file's, example for example."""
  samples = [(f"{i:04d}", jpeg(20 * i), f"a photo of thing {i}") for i in range(6)]
  write_shards(str(tmp_path / "train"), samples)
  write_shards(str(tmp_path / "val"), samples[:2])
  for name, lines in (("train", samples), ("val", samples[:2])):
    for key, image, _ in lines:
      (tmp_path / f"{key}.jpg").write_bytes(image)
    (tmp_path / f"{name}.tsv").write_text("".join(f"{key}.jpg\t{text}\n"
                                                  for key, _, text in lines))
  vocab = text_tokens.train_wordpiece([text for _, _, text in samples], 40,
                                      str(tmp_path / "vocab.txt"))
  text = {"tokenizer": vocab, "length": 8, "lower": False}
  batches = []
  for dataset, evaluation in ((f"webdataset:{tmp_path}/train", str(tmp_path / "val")),
                              (str(tmp_path / "train.tsv"), "val.tsv")):
    config = pair_config(dataset, loader="grain", eval_split=evaluation, text=text)
    batches.append(train(loaders.open_dataset(config), num_steps=2, batch_size=4))
  for ours, theirs in zip(*batches):
    assert sorted(ours) == ["image", "label", "text"]
    for key, value in ours.items():
      np.testing.assert_array_equal(value, theirs[key])


def test_unpaired_files_are_counted_and_left_out_and_none_paired_is_one_line(tmp_path, caplog):
  write_tar(str(tmp_path / "0.tar"), [("a.jpg", b"a"), ("a.txt", b"x"), ("b.jpg", b"b"),
                                      ("c.txt", b"c"), ("d.webp", b"d"), ("e.json", b"{}")])
  with caplog.at_level(logging.WARNING, logger="vit_jax"):
    split = webdataset.open_split(str(tmp_path / "0.tar"))
  assert contents(split) == [(b"a", ["x"])]
  assert "2 image(s) without a .txt and 1 .txt without an image left out; 1 samples read" in (
      caplog.text)
  write_tar(str(tmp_path / "none.tar"), [("a.jpg", b"a"), ("b.txt", b"b")])
  with pytest.raises(errors.InvalidInput, match=r"none.tar: no sample has both an image \(jpg, "
                     r"jpeg, png, webp\) and a caption \(.txt\) under one key in 1 shard"):
    webdataset.open_split(str(tmp_path / "none.tar"))


def test_the_fingerprint_changes_with_a_shard_and_only_then(shards):
  pattern = f"{shards}/train/{{00000..00001}}.tar"
  first = fingerprint.of_split(webdataset.open_split(pattern))
  assert fingerprint.of_split(webdataset.open_split(str(shards / "train"))) == first
  assert sorted(first["shards"]) == ["00000.tar", "00001.tar"]
  write_shards(str(shards / "train"), SAMPLES[:3] + [("0009", b"other", "other")] + SAMPLES[4:])
  second = fingerprint.of_split(webdataset.open_split(pattern))
  assert fingerprint.changed(first, second)
  assert fingerprint.describe_change(first, second) == "its examples differ (as many as before)"


def test_the_tf_loader_and_a_missing_eval_split_are_one_line(shards):
  config = pair_config(f"webdataset:{shards}/train")
  with pytest.raises(errors.InvalidInput, match=r"^webdataset:.*train is WebDataset tar shards, "
                     r"which the Grain loader reads: set config.loader='grain'$"):
    registry.open_source(config, loader="tf")
  with pytest.raises(errors.InvalidInput, match=r"is WebDataset shards: set config.eval_split "
                     r"to the held-out shards \(a pattern or a folder of \*.tar\)$"):
    registry.open_source(config, loader="grain")
  split, names = registry.open_eval_source(f"{shards}/val", "ignored", config, loader="grain")
  assert (contents(split), names) == (EXPECTED[:2], [])


def test_shards_on_gcs_read_as_local_ones(shards, gcs):
  folder = f"gs://{gcs.bucket}/wds"
  for name in ("00000.tar", "00001.tar"):
    storage.write_atomic(f"{folder}/{name}", (shards / "train" / name).read_bytes())
  assert registry.find(make_config(folder)) is webdataset.SOURCE
  for name in (f"webdataset:{folder}/{{00000..00001}}.tar", folder):
    split = webdataset.open_split(webdataset.pattern_of(name))
    assert contents(split) == EXPECTED
    assert split.data[[5, 0]].tolist() == [EXPECTED[5][0], EXPECTED[0][0]]
