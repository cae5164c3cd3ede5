"""TFDS coco_captions through the real builder: a small dataset written with its features
into a temporary data_dir as array_record (what `tfds build coco_captions
--file_format=array_record` writes), read by index in both loaders with every caption of
an example; a split not prepared so is one line."""

import io

import numpy as np
import pytest
from PIL import Image

from helpers import make_config, train
from vit_jax.base import errors
from vit_jax.data import fingerprint, loaders, text_tokens
from vit_jax.data.sources import registry

SPLITS = {"train": 5, "val": 3}


def captions_of(image_id):
  return [f"caption {k} of image {image_id}" for k in range(1 + image_id % 3)]


def examples(split):
  """COCO examples of one flat colour each (their id, read back from the pixels)."""
  first = 0 if split == "train" else 100
  for image_id in range(first, first + SPLITS[split]):
    yield image_id, {
        "image": np.full((6, 8, 3), 2 * image_id, np.uint8),
        "image/filename": f"{image_id}.jpg", "image/id": image_id,
        "objects": {"area": [], "bbox": np.zeros((0, 4), np.float32), "id": [],
                    "is_crowd": [], "label": []},
        "captions": [{"id": 10 * image_id + k, "text": text}
                     for k, text in enumerate(captions_of(image_id))]}


def prepare(data_dir, file_format):
  """coco_captions written into data_dir by its real builder, from examples()."""
  import tensorflow_datasets as tfds  # pylint: disable=import-outside-toplevel
  builder = tfds.builder("coco_captions", data_dir=data_dir, file_format=file_format)
  builder._split_generators = lambda dl_manager: {  # pylint: disable=protected-access
      split: examples(split) for split in SPLITS}
  builder.download_and_prepare(download_config=tfds.download.DownloadConfig())


@pytest.fixture(scope="module", name="data_dir")
def fixture_data_dir(tmp_path_factory):
  data_dir = str(tmp_path_factory.mktemp("tfds"))
  prepare(data_dir, "array_record")
  return data_dir


def config_for(data_dir, **settings):
  config = make_config("coco_captions")
  config.update(objective="contrastive", tfds_data_dir=data_dir, **settings)
  return config


def image_id(encoded: bytes) -> int:
  return round(float(np.asarray(Image.open(io.BytesIO(encoded))).mean()) / 2)


@pytest.mark.parametrize("loader", ["grain", "tf"])
def test_both_loaders_read_every_caption_of_each_image_by_index(data_dir, loader):
  train, evaluation, names = registry.open_source(config_for(data_dir), loader=loader)
  assert (len(train), len(evaluation), names) == (5, 3, [])
  for split, ids in ((train, range(5)), (evaluation, range(100, 103))):
    found = {image_id(split.data[i]): split.captions.of(i) for i in range(len(split))}
    assert found == {i: captions_of(i) for i in ids}
    assert split.labels.tolist() == [0] * len(split) and len(split.captions) == len(split)
  gathered = train.data[np.array([4, 1])]  # the tf stack's gather
  assert gathered.dtype == object and list(gathered) == [train.data[4], train.data[1]]


def test_both_stacks_feed_the_same_token_ids_and_pixels(data_dir, tmp_path):
  texts = [text for image in [*range(5), *range(100, 103)] for text in captions_of(image)]
  vocab = text_tokens.train_wordpiece(texts, 60, str(tmp_path / "vocab.txt"))
  text = {"tokenizer": vocab, "length": 8, "lower": False}
  datasets = {loader: loaders.open_dataset(config_for(data_dir, loader=loader, text=text))
              for loader in ("tf", "grain")}
  for ours, theirs in zip(*(train(datasets[loader], num_steps=2, batch_size=4)
                            for loader in ("grain", "tf"))):
    np.testing.assert_array_equal(ours["text"], theirs["text"])
    assert ours["image"].shape == theirs["image"].shape == (4, 16, 16, 3)
  (ours,), (theirs,) = (list(datasets[loader].eval_batches(batch_size=4, process_index=0,
                                                           process_count=1))
                        for loader in ("grain", "tf"))
  np.testing.assert_array_equal(ours["text"], theirs["text"])
  np.testing.assert_array_equal(ours["mask"], [1, 1, 1, 0])
  assert np.abs(ours["image"] - theirs["image"]).max() * 127.5 <= 1.0


def test_splits_names_and_the_fingerprint(data_dir):
  config = config_for(data_dir, train_split="train+val", eval_split="train[:2]")
  train, evaluation, _ = registry.open_source(config, loader="grain")
  assert (len(train), len(evaluation)) == (8, 2)
  found = fingerprint.of_split(train)
  assert found["kind"] == "tfds" and found["split"] == "train+val" and found["examples"] == 8
  assert fingerprint.of_split(registry.open_source(config, loader="tf")[0]) == found
  split, names = registry.open_eval_source("coco_captions:1.1.0", "val", config, loader="grain")
  assert (len(split), names) == (3, [])
  assert registry.class_count(config) == 0
  with pytest.raises(errors.InvalidInput, match=r"^coco_captions has no split 'test' \(it has "
                     r"train, val\); set config.train_split / eval_split"):
    registry.open_source(config_for(data_dir, eval_split="test"), loader="grain")


def test_a_dataset_not_prepared_as_array_record_says_how_to_build_it(tmp_path):
  data_dir = str(tmp_path)
  for state in ("not prepared", "prepared as tfrecord"):
    with pytest.raises(FileNotFoundError, match=rf"^TFDS coco_captions is {state} in .*; run "
                       r"tfds build coco_captions --file_format=array_record --data_dir=DIR "
                       r"and set config.tfds_data_dir=DIR \(or set "
                       r"config.tfds_download=True\)$"):
      registry.open_source(config_for(data_dir), loader="tf")
    prepare(data_dir, "tfrecord")
