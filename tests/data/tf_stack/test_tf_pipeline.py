"""Input pipeline: process-count independent batches, exact eval, bad images named."""

import io
import os

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from helpers import UNICODE_CLASSES, UNICODE_FILES, corrupt_jpeg, demo_config, make_config, train, write_unicode_folder
from vit_jax.base import errors
from vit_jax.data import datasets, order, randaugment, splits
from vit_jax.data.tf_stack import tf_pipeline, tf_preprocess
from vit_jax.training import loop as train_lib


def indexed_dataset(num_train, num_eval, **pp):
  """Constant images whose pixels encode their index (channel 0: index // 256, channel 1:
  index % 256): every crop, flip and resize keeps it, so batches reveal their examples."""
  def split(n):
    index = np.arange(n)
    pixels = np.zeros((n, 8, 8, 3), np.uint8)
    pixels[..., 0] = (index // 256)[:, None, None]
    pixels[..., 1] = (index % 256)[:, None, None]
    return splits.IndexedSplit(pixels, (index % 3).astype(np.int32), "pixels")
  config = make_config(**pp)
  return tf_pipeline.Dataset(split(num_train), split(num_eval), ["a", "b", "c"], config.pp, 16)


def indices_of(images: np.ndarray) -> np.ndarray:
  values = np.rint(images[:, 0, 0, :2] * 127.5 + 127.5).astype(int)
  return values[:, 0] * 256 + values[:, 1]



@pytest.mark.parametrize("pp", [{}, {"mixup_alpha": 0.1},
                                {"preset": "inception", "resize": None}, {"randaug": (2, 15)}])
def test_global_batches_do_not_depend_on_process_count(pp):
  dataset = tf_pipeline.open_dataset(make_config(**pp))
  whole = train(dataset)
  halves = [train(dataset, process_count=2, process_index=p) for p in range(2)]
  for step, batch in enumerate(whole):
    for key in batch:
      np.testing.assert_array_equal(
          np.concatenate([halves[0][step][key], halves[1][step][key]]), batch[key])
  assert not np.array_equal(whole[0]["image"], whole[1]["image"])
  resumed = train(dataset, start_step=2)
  assert len(resumed) == 2
  for key in whole[2]:
    np.testing.assert_array_equal(resumed[0][key], whole[2][key])
  if pp.get("mixup_alpha"):
    assert whole[0]["label"].shape == (8, 10)
    np.testing.assert_allclose(whole[0]["label"].sum(axis=1), 1.0, rtol=1e-6)


def test_each_epoch_visits_every_example_once():
  dataset = indexed_dataset(10, 3)
  batches = train(dataset, num_steps=5, batch_size=4)  # 20 positions: two epochs of 10
  seen = np.concatenate([indices_of(b["image"]) for b in batches])
  assert sorted(seen[:10]) == list(range(10)) and sorted(seen[10:]) == list(range(10))
  assert list(seen[:10]) != list(seen[10:])


@pytest.mark.parametrize("flip", [False, True])
def test_train_flips_follow_pp_flip(flip):
  """Images dark on the left, bright on the right: a mirrored one is bright on the left."""
  columns = np.arange(0, 256, 32, dtype=np.uint8)[None, None, :, None]
  split = splits.IndexedSplit(np.broadcast_to(columns, (16, 8, 8, 3)).copy(),
                              np.zeros(16, np.int32), "pixels")
  dataset = tf_pipeline.Dataset(split, split, ["a"], make_config(resize=16, flip=flip).pp, 16)
  images = train(dataset, num_steps=1, batch_size=16)[0]["image"]
  mirrored = images[:, 0, 0, 0] > images[:, 0, -1, 0]
  assert 0 < mirrored.sum() < 16 if flip else not mirrored.any()


def test_randaug_augments_each_crop_with_its_example_seed():
  """pp.randaug=(N, M): the crop and flip of the run without it, as uint8 pixels, then
  randaugment seeded by the example's seed folded with 3: reproducible and exact."""
  def pixels(images):
    return np.rint(images * 127.5 + 127.5).astype(np.uint8)
  def batches(num_steps=2, **pp):
    config = make_config(preset="inception", resize=None, **pp)
    return train(tf_pipeline.open_dataset(config), num_steps=num_steps)
  plain, crops, augmented = batches(), batches(randaug=(0, 15)), batches(randaug=(2, 15))
  for step in range(2):  # N = 0: only the crop's quantisation to uint8 (truncation)
    np.testing.assert_allclose(crops[step]["image"], plain[step]["image"], atol=1.001 / 127.5)
    for row, position in enumerate(order.row_positions(step, 8, 0, 1)):
      seed = tf.random.experimental.stateless_fold_in(order.example_seed(3, position), 3)
      want = randaugment.randaugment(pixels(crops[step]["image"][row]), 2, 15, seed.numpy())
      np.testing.assert_array_equal(pixels(augmented[step]["image"][row]), want)
  assert not np.array_equal(augmented[0]["image"], crops[0]["image"])
  np.testing.assert_array_equal(batches(1, randaug=(2, 15))[0]["image"], augmented[0]["image"])


@pytest.mark.parametrize("randaug", [(2,), (2, -1), "2,15", (2.0, 15), (True, 3), (None,)])
def test_bad_randaug_is_one_line(randaug):
  with pytest.raises(ValueError, match=r"^config.pp.randaug=.* must be None \(off\) or a "
                                       r"pair of ints \(num_layers, magnitude\), both >= 0, "
                                       r"e.g. \(2, 15\)$"):
    tf_pipeline.open_dataset(make_config(randaug=randaug))


@pytest.mark.parametrize("process_count", [1, 2])
def test_eval_counts_every_example_once(process_count):
  dataset = indexed_dataset(4, 21)
  parts = [list(dataset.eval_batches(batch_size=8, process_index=p,
                                     process_count=process_count))
           for p in range(process_count)]
  assert len({len(part) for part in parts}) == 1  # every process runs the same steps
  batches = [b for part in parts for b in part]
  assert all(b["image"].shape == (8 // process_count, 16, 16, 3) for b in batches)
  assert sum(b["mask"].sum() for b in batches) == 21
  real = np.concatenate([indices_of(b["image"])[b["mask"] > 0] for b in batches])
  assert sorted(real) == list(range(21))


def test_eval_batches_of_the_train_split():
  dataset = indexed_dataset(13, 5)
  batches = list(dataset.eval_batches(batch_size=8, process_index=0, process_count=1,
                                      split="train"))
  real = np.concatenate([b["image"][b["mask"] > 0] for b in batches])
  assert list(indices_of(real)) == list(range(13))
  evaluation = next(dataset.eval_batches(batch_size=8, process_index=0, process_count=1))
  np.testing.assert_array_equal(real[:5], evaluation["image"][:5])  # resized like eval
  with pytest.raises(ValueError, match="unknown split 'validation'; use 'train' or 'eval'"):
    dataset.eval_batches(batch_size=8, process_index=0, process_count=1, split="validation")


def test_image_folder(folder):
  dataset = tf_pipeline.open_dataset(make_config(str(folder)))
  assert dataset.info.class_names == ["cat", "dog"]
  assert (dataset.info.num_train, dataset.info.num_eval) == (4, 2)
  assert list(dataset.train.labels) == [0, 0, 1, 1]
  batch = train(dataset, num_steps=1, batch_size=4)[0]
  assert batch["image"].shape == (4, 16, 16, 3)
  assert np.abs(batch["image"]).max() <= 1.0
  inception = tf_pipeline.open_dataset(make_config(str(folder), preset="inception", resize=None))
  assert train(inception, num_steps=1, batch_size=4)[0]["image"].shape == (4, 16, 16, 3)
  evaluation = list(dataset.eval_batches(batch_size=4, process_index=0, process_count=1))
  assert [list(b["mask"]) for b in evaluation] == [[1, 1, 0, 0]]



def test_image_folder_with_non_ascii_names(tmp_path):
  root = write_unicode_folder(tmp_path / "données 🖼")
  dataset = tf_pipeline.open_dataset(make_config(str(root)))
  assert dataset.info.class_names == sorted(UNICODE_CLASSES)
  batches = train(dataset, num_steps=2, batch_size=9)  # 9 images: each step is one epoch
  assert [b["image"].shape for b in batches] == [(9, 16, 16, 3)] * 2
  evaluation = list(dataset.eval_batches(batch_size=4, process_index=0, process_count=1))
  images = np.concatenate([b["image"] for b in evaluation])[:9]
  assert sum(b["mask"].sum() for b in evaluation) == 9
  paths = [root / "test" / name / file for name in sorted(UNICODE_CLASSES)
           for file in sorted(UNICODE_FILES)]
  for image, path in zip(images, paths):  # each eval image is its file, in order
    expected = tf_preprocess.eval_resize(tf.constant(path.read_bytes()), 16)
    np.testing.assert_array_equal(image, expected)


def test_training_on_non_ascii_names(tmp_path):
  """The main job's path: a bad name only in test/ would fail at the first evaluation."""
  root = write_unicode_folder(tmp_path / "données")
  config = demo_config(dataset=str(root), total_steps=2, batch=4, batch_eval=4,
                       eval_every=2, checkpoint_every=2, progress_every=1)
  with config.unlocked():
    config.model.num_layers = 1  # compiles faster
  result = train_lib.train_and_evaluate(config, str(tmp_path / "run"))
  assert result["eval/examples"] == 9





@pytest.mark.parametrize("preset", ["bit", "inception"])
def test_corrupt_image_is_named_in_train_and_eval(folder, preset):
  (folder / "train/dog/a.JPG").write_bytes(corrupt_jpeg())
  (folder / "test/dog/f.jpg").write_bytes(corrupt_jpeg())
  dataset = tf_pipeline.open_dataset(make_config(str(folder), preset=preset,
                                          resize=20 if preset == "bit" else None))
  failures = {
      "train": lambda: train(dataset, num_steps=2, batch_size=4),
      "eval": lambda: list(dataset.eval_batches(batch_size=2, process_index=0, process_count=1)),
      "features": lambda: list(dataset.eval_batches(batch_size=2, process_index=0,
                                                    process_count=1, split="train")),
  }
  for name, path in (("train", "train/dog/a.JPG"), ("eval", "test/dog/f.jpg"),
                     ("features", "train/dog/a.JPG")):
    with pytest.raises(splits.CorruptImageError) as error:
      failures[name]()
    message = str(error.value)
    assert message.startswith(f"corrupt image {folder / path}: ") and "\n" not in message
    assert message.endswith("; replace it with a readable copy, or remove it (a run that "
                            "already started then resumes with "
                            "--config.allow_data_change=True)") and "{{" not in message


def test_corrupt_encoded_image_is_named():
  """TFDS datasets held in memory: the example's index and the dataset are named."""
  buffer = io.BytesIO()
  Image.fromarray(np.zeros((4, 4, 3), np.uint8)).save(buffer, "PNG")
  encoded = np.array([buffer.getvalue(), corrupt_jpeg(), buffer.getvalue()], object)
  split = splits.IndexedSplit(encoded, np.zeros(3, np.int32), "encoded", "TFDS x split 'test'")
  dataset = tf_pipeline.Dataset(split, split, ["a"], make_config().pp, 16)
  with pytest.raises(splits.CorruptImageError, match=r"^corrupt image: example 1 of TFDS x "
                     "split 'test': .*; rebuild the dataset$"):
    list(dataset.eval_batches(batch_size=2, process_index=0, process_count=1))


def test_image_deleted_after_opening_is_named(folder):
  dataset = tf_pipeline.open_dataset(make_config(str(folder)))
  os.remove(folder / "test/cat/e.png")
  with pytest.raises(FileNotFoundError, match=r"^image .*e.png disappeared after the dataset "
                     "was opened; restore it, or rerun to scan the folder again$"):
    list(dataset.eval_batches(batch_size=2, process_index=0, process_count=1))


def test_bad_preset_and_name():
  with pytest.raises(ValueError, match="choose one of inception, bit"):
    tf_pipeline.open_dataset(make_config(preset="random"))
  with pytest.raises(ValueError, match="pp.resize=20 applies to the bit preset only"):
    tf_pipeline.open_dataset(make_config(preset="inception"))
  with pytest.raises(ValueError, match="did you mean cifar10"):
    tf_pipeline.open_dataset(make_config("cifar-10"))
  with pytest.raises(ValueError, match=(  # not "did you mean imagenet2012"
      r"^unknown dataset 'imagenet21k': .*; TFDS does not publish ImageNet-21k: set "
      r"config.tfds_data_dir to a TFDS build of it \(name imagenet21k, split full\), or give "
      r"an image folder after the config's name \(configs/augreg.py:NAME,DIR\)$")):
    tf_pipeline.open_dataset(make_config("imagenet21k"))


@pytest.mark.parametrize("randaug", [(2, 100), (2, 31), (11, 10), (1000, 15)])
def test_randaug_past_the_references_range_is_one_line(randaug):
  with pytest.raises(ValueError, match=(
      rf"^config.pp.randaug=\({randaug[0]}, {randaug[1]}\) is past RandAugment's range \(up "
      r"to 10 layers, magnitude up to 30; .*\): e.g. \(2, 15\)$")):
    tf_pipeline.open_dataset(make_config(randaug=randaug))
  datasets.check_randaug((10, 30))  # the bounds themselves are fine


def test_naflex_on_digits_and_a_streamed_tfds_split(tmp_path, monkeypatch):
  """config.pp.max_patches: in-memory pixels (the digits, BiT's window) and a streamed
  TFDS split (process parts, the eval padding rows' patches zero) give patch batches; a
  budget without the model's patch size, or with MixUp, is refused."""
  import tensorflow_datasets as tfds  # pylint: disable=import-outside-toplevel
  from vit_jax.data.sources import tfds_builder  # pylint: disable=import-outside-toplevel
  digits = tf_pipeline.open_dataset(make_config(max_patches=9), patch_size=4)
  image = train(digits, num_steps=1)[0]["image"]
  assert image["patches"].shape == (8, 9, 48) and (image["grid"] == 3).all()
  tfds.testing.DummyMnist(data_dir=str(tmp_path)).download_and_prepare()
  monkeypatch.setattr(tfds_builder, "IN_MEMORY_LIMIT_BYTES", 0)
  config = make_config("dummy_mnist", max_patches=9, preset="inception", resize=None)
  config.tfds_data_dir = str(tmp_path)
  streamed = tf_pipeline.open_dataset(config, patch_size=4)
  assert isinstance(streamed.train, splits.StreamingSplit)
  assert train(streamed, process_count=2, num_steps=1)[0]["image"]["mask"].shape == (4, 9)
  parts = [list(streamed.eval_batches(batch_size=6, process_index=p, process_count=2))
           for p in range(2)]
  assert sum(b["mask"].sum() for part in parts for b in part) == 20
  padding = parts[1][-1]
  assert not padding["image"]["patches"][padding["mask"] == 0].any()
  with pytest.raises(ValueError, match="config.pp.max_patches is set: open the dataset with "
                     "the model's patch_size"):
    tf_pipeline.open_dataset(make_config(max_patches=9))
  with pytest.raises(errors.InvalidInput, match=r"^config.pp.mixup_alpha=0.2 with "
                     r"NaFlex \(config.pp.max_patches=9\): images of other grids cannot be "
                     "mixed; set mixup_alpha=0$"):
    tf_pipeline.open_dataset(make_config(max_patches=9, mixup_alpha=0.2), patch_size=4)
