"""Multi-label data: an image folder with labels.csv (any layout, all-negative rows, every
mistake of the file refused in one line) and TFDS features that list classes
(config.label_feature), both read as multi-hot, each example once across processes."""

import os

import numpy as np
import pytest
import tensorflow_datasets as tfds

from helpers import make_config, tiny_tfds_builder, write_image
from vit_jax.data.sources import multilabel_folder, registry
from vit_jax.data.tf_stack import tf_pipeline

CSV = multilabel_folder.LABELS_FILE


def write_folder(root):
  """train/ (nested folders, an unlabelled image) and test/, with their labels.csv."""
  write_image(root / "train/a.png")
  write_image(root / "train/deep/er/b.JPG", fmt="JPEG")
  write_image(root / "train/c.png", mode="L")
  write_image(root / "train/none.png")
  (root / "train" / CSV).write_text(
      "path,labels\na.png,sky;tree\ndeep/er/b.JPG,tree\nc.png, sky ; road \nnone.png,\n")
  write_image(root / "test/x.png")
  write_image(root / "test/y.png")
  (root / "test" / CSV).write_text("path,labels\nx.png,road\n\"y.png\",\n")
  return root


def test_a_labels_file_gives_multi_hot_labels_and_keeps_unlabelled_images(tmp_path):
  dataset = tf_pipeline.open_dataset(make_config(str(write_folder(tmp_path))))
  info = dataset.info
  assert info.class_names == ["road", "sky", "tree"] and info.multi_label
  assert (info.num_train, info.num_eval, info.train_class_counts) == (4, 2, [1, 2, 2])
  by_file = {os.path.relpath(os.fsdecode(p), tmp_path / "train"): row.tolist()
             for p, row in zip(dataset.train.data, dataset.train.labels)}
  assert by_file == {"a.png": [0, 1, 1], os.path.join("deep", "er", "b.JPG"): [0, 0, 1],
                     "c.png": [1, 1, 0], "none.png": [0, 0, 0]}
  seen = []
  for process in range(2):  # the eval split once over two processes, padding masked
    for batch in dataset.eval_batches(batch_size=4, process_index=process, process_count=2):
      assert batch["label"].shape == (2, 3)
      seen += [row.tolist() for row, real in zip(batch["label"], batch["mask"]) if real]
  assert sorted(seen) == [[0, 0, 0], [1, 0, 0]]
  batch = next(dataset.train_batches(batch_size=2, start_step=0, num_steps=1, seed=0,
                                     process_index=0, process_count=1))
  assert batch["label"].shape == (2, 3) and batch["image"].shape == (2, 16, 16, 3)


def test_a_labels_file_saved_with_a_byte_order_mark_is_read(tmp_path):
  """Excel's "CSV UTF-8" starts the file with a BOM: its header is still 'path,labels'."""
  write_folder(tmp_path)
  path = tmp_path / "train" / CSV
  path.write_bytes(path.read_text().encode("utf-8-sig"))
  assert multilabel_folder.class_names(str(tmp_path)) == ["road", "sky", "tree"]


BAD_FILES = {  # name: (damage(root), the one line's start)
    "header": (lambda r: (r / "train" / CSV).write_text("file,tags\na.png,sky\n"),
               "must start with the header row 'path,labels', not 'file,tags'"),
    "columns": (lambda r: (r / "train" / CSV).write_text("path,labels\na.png,sky,x\n,tree\n"),
                "2 row\\(s\\) are not 'path,labels' .*: line 2, line 3"),
    "twice": (lambda r: (r / "test" / CSV).write_text("path,labels\nx.png,\ny.png,\n./x.png,\n"),
              "lists 1 path\\(s\\) twice: './x.png'"),
    "unknown": (lambda r: (r / "test" / CSV).write_text("path,labels\nx.png,cat;road\ny.png,dog"),
                "uses 2 label\\(s\\) that train/labels.csv never does: 'cat', 'dog'"),
    "missing_path": (lambda r: (r / "test" / CSV).write_text("path,labels\nx.png,\ny.png,\n"
                                                             "z.png,road\n"),
                     "lists 1 path\\(s\\) missing from .*test: 'z.png'; fix the paths"),
    "unlisted": (lambda r: (r / "test" / CSV).write_text("path,labels\nx.png,\n"),
                 "1 image\\(s\\) in .*test are missing from .*labels.csv: 'y.png'; add a row"),
    "no_file": (lambda r: os.remove(r / "test" / CSV), "test has no labels.csv"),
    "no_labels": (lambda r: (r / "train" / CSV).write_text(
        "path,labels\na.png,\ndeep/er/b.JPG,\nc.png,\nnone.png,\n"), "gives no image a label"),
}


@pytest.mark.parametrize("name", BAD_FILES)
def test_bad_labels_files_are_refused_in_one_line(tmp_path, name):
  damage, message = BAD_FILES[name]
  damage(write_folder(tmp_path))
  with pytest.raises(ValueError, match=message) as raised:
    tf_pipeline.open_dataset(make_config(str(tmp_path)))
  assert "\n" not in str(raised.value)


def test_a_corrupt_listed_image_is_named(tmp_path):
  write_folder(tmp_path)
  (tmp_path / "test/y.png").write_bytes(b"garbage")
  with pytest.raises(ValueError, match="corrupt image .*y.png: not a JPEG or PNG"):
    tf_pipeline.open_dataset(make_config(str(tmp_path)))


# 'objects' lists classes, 'label' is one class.
TinyTagged = tiny_tfds_builder("TinyTagged", {
    "image": tfds.features.Image(shape=(8, 8, 3)),
    "label": tfds.features.ClassLabel(names=["indoor", "outdoor"]),
    "objects": tfds.features.Sequence(tfds.features.ClassLabel(names=["a", "b", "c"]))}, {
        split: [{"image": np.full((8, 8, 3), i * 20, np.uint8), "label": i % 2,
                 "objects": [c for c in range(3) if (i >> c) & 1]} for i in range(count)]
        for split, count in (("train", 5), ("test", 3))})


def test_a_tfds_list_of_classes_is_read_as_multi_hot(tmp_path):
  TinyTagged(data_dir=str(tmp_path)).download_and_prepare()
  config = make_config("tiny_tagged", label_feature="objects")
  config.update({"label_feature": "objects", "tfds_data_dir": str(tmp_path)})
  del config.pp.label_feature
  dataset = tf_pipeline.open_dataset(config)
  assert dataset.info.multi_label and dataset.info.class_names == ["a", "b", "c"]
  assert sorted(dataset.train.labels.tolist()) == [[0, 0, 0], [0, 0, 1], [0, 1, 0],
                                                   [1, 0, 0], [1, 1, 0]]
  assert dataset.info.train_class_counts == [2, 2, 1]
  assert registry.class_count(config) == 3
  config.label_feature = "label"  # the single-label feature of the same dataset
  assert not tf_pipeline.open_dataset(config).info.multi_label
  config.label_feature = "tags"
  with pytest.raises(ValueError, match="lacks the feature\\(s\\) tags; .*config.label_feature"):
    tf_pipeline.open_dataset(config)
  config.dataset = str(write_folder(tmp_path / "folder"))
  with pytest.raises(ValueError, match="config.label_feature='tags' applies to TFDS datasets"):
    tf_pipeline.open_dataset(config)
