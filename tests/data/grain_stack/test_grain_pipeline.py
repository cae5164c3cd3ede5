"""The Grain loader: the tf.data path's order rule, eval pixels and labels, exact resume at
any step, process sharding, MixUp, worker processes, and bad images named."""

import os
import shutil

import numpy as np
import pytest
import sklearn
from PIL import Image

from helpers import corrupt_jpeg, make_config, train, write_image, write_unicode_folder
from naflex_folder import write_mixed_aspect_folder
from vit_jax.base import errors
from vit_jax.data import datasets, loaders, splits
from vit_jax.data.grain_stack import grain_pipeline
from vit_jax.data.tf_stack import tf_pipeline

SAMPLE_PHOTOS = os.path.join(os.path.dirname(sklearn.__file__), "datasets", "images")


def grain_config(dataset="digits", **pp):
  config = make_config(dataset, **pp)
  config.loader = "grain"
  return config


def photo_folder(root):
  """A class folder of real photos (scikit-learn's JPEGs, cut into crops saved as JPEG
  and PNG) and a test split: camera JPEGs, whose decoding the two loaders must share."""
  for split in ("train", "test"):
    for name in ("china.jpg", "flower.jpg"):
      photo = Image.open(os.path.join(SAMPLE_PHOTOS, name))
      folder = os.path.join(root, split, name.split(".")[0])
      os.makedirs(folder, exist_ok=True)
      shutil.copy(os.path.join(SAMPLE_PHOTOS, name), folder)
      photo.crop((10, 20, 210, 170)).save(os.path.join(folder, "crop.png"))
      photo.crop((50, 40, 301, 233)).save(os.path.join(folder, "crop.jpg"), quality=85)
  return str(root)


def test_eval_pixels_and_labels_match_tf_data_within_a_level(tmp_path):
  root = photo_folder(tmp_path)
  for crop in (32, 224):
    tf_data = tf_pipeline.open_dataset(make_config(root, crop=crop, resize=None))
    grain_data = loaders.open_dataset(grain_config(root, crop=crop, resize=None))
    assert isinstance(grain_data, grain_pipeline.Dataset)
    assert grain_data.fingerprints() == tf_data.fingerprints()
    expected = list(tf_data.eval_batches(batch_size=4, process_index=0, process_count=1))
    got = list(grain_data.eval_batches(batch_size=4, process_index=0, process_count=1))
    assert len(got) == len(expected) == 2
    for ours, theirs in zip(got, expected):
      np.testing.assert_array_equal(ours["label"], theirs["label"])
      np.testing.assert_array_equal(ours["mask"], theirs["mask"])
      assert np.abs(ours["image"] - theirs["image"]).max() * 127.5 <= 1.0


@pytest.mark.parametrize("pp", [{}, {"mixup_alpha": 0.2},
                                {"preset": "inception", "resize": None}])
def test_a_step_is_a_function_of_seed_and_step_on_any_topology(pp):
  dataset = loaders.open_dataset(grain_config(**pp))
  whole = train(dataset)
  assert whole[0]["image"].shape == (8, 16, 16, 3) and whole[0]["image"].dtype == np.float32
  halves = [train(dataset, process_count=2, process_index=p) for p in range(2)]
  for step, batch in enumerate(whole):
    for key in batch:
      np.testing.assert_array_equal(
          np.concatenate([halves[0][step][key], halves[1][step][key]]), batch[key])
  assert not np.array_equal(whole[0]["image"], whole[1]["image"])
  resumed = train(dataset, start_step=2)  # a resume builds step 2 on: nothing replayed
  assert len(resumed) == 2
  for key in whole[2]:
    np.testing.assert_array_equal(resumed[0][key], whole[2][key])
  if pp.get("mixup_alpha"):
    assert whole[0]["label"].shape == (8, 10) and whole[0]["label"].dtype == np.float32
    np.testing.assert_allclose(whole[0]["label"].sum(axis=1), 1.0, rtol=1e-6)
    assert not np.array_equal(whole[0]["label"], np.round(whole[0]["label"]))


def test_train_batches_hold_the_examples_tf_data_reads():
  """The same order rule: each step's labels are those of the tf.data path's step."""
  grain_batches = train(loaders.open_dataset(grain_config()), num_steps=6, batch_size=16)
  tf_batches = train(tf_pipeline.open_dataset(make_config()), num_steps=6, batch_size=16)
  for ours, theirs in zip(grain_batches, tf_batches):
    np.testing.assert_array_equal(ours["label"], theirs["label"])
    assert -1 <= ours["image"].min() < ours["image"].max() <= 1


def test_worker_processes_give_the_threads_batches():
  threads = loaders.open_dataset(grain_config())
  config = grain_config()
  config.grain_workers = 1  # a worker process starts in seconds: one
  workers = loaders.open_dataset(config)
  for ours, theirs in zip(train(workers, num_steps=3), train(threads, num_steps=3)):
    for key in ours:
      np.testing.assert_array_equal(ours[key], theirs[key])


def test_any_file_name_reads_and_a_corrupt_image_is_named(tmp_path):
  unicode_folder = write_unicode_folder(tmp_path / "unicode")
  assert len(train(loaders.open_dataset(grain_config(str(unicode_folder))), num_steps=2)) == 2
  tmp_path = tmp_path / "corrupt"
  for split in ("train", "test"):
    for name in ("a", "b"):
      write_image(str(tmp_path / split / name / "ok.png"))
  bad = tmp_path / "train" / "b" / "bad.jpg"
  bad.write_bytes(corrupt_jpeg())
  dataset = loaders.open_dataset(grain_config(str(tmp_path)))
  with pytest.raises(splits.CorruptImageError, match=f"corrupt image {bad}: .*; replace it "
                     r"with a readable copy, or remove it \(a run that already started then "
                     r"resumes with --config.allow_data_change=True\)"):
    train(dataset, num_steps=2, batch_size=3)


def test_unknown_loader_and_bad_worker_count_are_one_line():
  config = grain_config()
  config.loader = "torch"
  with pytest.raises(errors.InvalidInput, match=r"unknown config.loader='torch'; choose one "
                     r"of 'tf', 'grain'"):
    datasets.check(config, 4)
  config.loader, config.grain_workers = "grain", -1
  with pytest.raises(errors.InvalidInput, match="config.grain_workers=-1 must be >= 0"):
    datasets.check(config, 4)


def test_randaugment_runs_per_example_on_uint8_pixels_and_is_reproducible():
  """config.pp.randaug: the crop's pixels go back to uint8 before vit_jax.data.randaugment
  (as on the tf.data path), so every augmented value is a whole level; the same seed gives
  the same batch, and it differs from the plain one."""
  plain = train(loaders.open_dataset(grain_config()), num_steps=1)[0]
  config = grain_config()
  config.pp.randaug = (2, 15)
  augmented = train(loaders.open_dataset(config), num_steps=1)[0]
  again = train(loaders.open_dataset(config), num_steps=1)[0]
  np.testing.assert_array_equal(augmented["image"], again["image"])
  np.testing.assert_array_equal(augmented["label"], plain["label"])
  assert np.abs(augmented["image"] - plain["image"]).mean() > 0.05
  levels = augmented["image"] * 127.5 + 127.5
  np.testing.assert_allclose(levels, np.round(levels), atol=1e-3)


# NaFlex (config.pp.max_patches): 8 px patches, 24 at most; the fixture's shapes give
# several grids in one batch.
NAFLEX_PATCH = 8
# The Grain loader reads as transformers (PIL on uint8), tf.data as big_vision (floats):
# measured up to 1.005 levels of 255 apart (tests/data/tf_stack/test_tf_naflex.py).
NAFLEX_TOLERANCE = 1.02 / 127.5


@pytest.fixture(name="mixed_aspect", scope="module")
def fixture_mixed_aspect(tmp_path_factory):
  return str(write_mixed_aspect_folder(tmp_path_factory.mktemp("mixed")))


def naflex_config(root, loader, **pp):
  config = make_config(root, max_patches=24, **pp)
  config.loader = loader
  return config


def test_naflex_eval_batches_equal_tf_data_on_mixed_aspect_ratios(mixed_aspect):
  opened = {loader: loaders.open_dataset(naflex_config(mixed_aspect, loader), NAFLEX_PATCH)
            for loader in ("tf", "grain")}
  assert opened["tf"].fingerprints() == opened["grain"].fingerprints()
  assert opened["grain"].fingerprints()["train"]["max_patches"] == 24  # a resume sees it
  batches = {loader: list(dataset.eval_batches(batch_size=8, process_index=0, process_count=1))
             for loader, dataset in opened.items()}
  assert len(batches["grain"]) == len(batches["tf"]) == 2
  for ours, theirs in zip(batches["grain"], batches["tf"]):
    for key in ("label", "mask"):
      np.testing.assert_array_equal(ours[key], theirs[key])
    for key in ("grid", "mask"):
      np.testing.assert_array_equal(ours["image"][key], theirs["image"][key])
    assert np.abs(ours["image"]["patches"] - theirs["image"]["patches"]).max() <= NAFLEX_TOLERANCE
    assert len({tuple(grid) for grid in ours["image"]["grid"]}) >= 3  # mixed in one batch


def test_naflex_train_batches_on_both_loaders(mixed_aspect):
  """The order rule's labels on both loaders; each row's patches are its grid's, in
  [-1, 1], zeros past them."""
  pp = {"preset": "inception", "resize": None, "randaug": (2, 9)}
  grain_data = loaders.open_dataset(naflex_config(mixed_aspect, "grain", **pp), NAFLEX_PATCH)
  tf_data = loaders.open_dataset(naflex_config(mixed_aspect, "tf", **pp), NAFLEX_PATCH)
  for ours, theirs in zip(train(grain_data, num_steps=2), train(tf_data, num_steps=2)):
    np.testing.assert_array_equal(ours["label"], theirs["label"])
    for image in (ours["image"], theirs["image"]):
      assert image["patches"].shape == (8, 24, NAFLEX_PATCH ** 2 * 3)
      assert image["patches"].dtype == np.float32 and image["mask"].dtype == np.int32
      np.testing.assert_array_equal(image["mask"].sum(1), image["grid"].prod(1))
      assert not image["patches"][image["mask"] == 0].any()
      assert -1 <= image["patches"].min() < image["patches"].max() <= 1


def test_naflex_worker_processes_give_the_threads_batches(mixed_aspect):
  threads = loaders.open_dataset(naflex_config(mixed_aspect, "grain"), NAFLEX_PATCH)
  config = naflex_config(mixed_aspect, "grain")
  config.grain_workers = 1
  workers = loaders.open_dataset(config, NAFLEX_PATCH)
  from grain._src.python.ipc.shared_memory_array import SharedMemoryArray  # pylint: disable=import-outside-toplevel
  for ours, theirs in zip(train(workers, num_steps=2), train(threads, num_steps=2)):
    for key in ("patches", "mask", "grid"):
      np.testing.assert_array_equal(ours["image"][key], theirs["image"][key])
      shared = ours["image"][key]  # the image dict's arrays unlinked too (no leak at exit)
      assert not (isinstance(shared, SharedMemoryArray) and shared._unlink_on_del)  # pylint: disable=protected-access
