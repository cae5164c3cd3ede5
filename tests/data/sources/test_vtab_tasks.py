"""VTAB-1k task definitions: splits, labels, opening tasks (TFDS and directories), errors."""

import dataclasses

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds

from helpers import make_config, train, write_image
from vit_jax.data import splits
from vit_jax.data.sources import tfds_builder, vtab_tasks
from vit_jax.data.tf_stack import tf_pipeline
from vit_jax.training import config_defaults


class VtabFakeClevr(tfds.core.GeneratorBasedBuilder):
  """CLEVR's features on 2,030 4x4 images whose first two pixels spell the example's
  index; example i has 3 + i % 8 objects, the closest at depth 7.5 + (i % 7) / 2."""
  VERSION = tfds.core.Version("1.0.0")

  def _info(self):
    return tfds.core.DatasetInfo(builder=self, features=tfds.features.FeaturesDict({
        "image": tfds.features.Image(shape=(4, 4, 3)),
        "objects": tfds.features.Sequence({
            "size": tfds.features.ClassLabel(num_classes=2),
            "pixel_coords": tfds.features.Tensor(shape=(3,), dtype=np.float32)})}))

  def _split_generators(self, dl_manager):
    return {"train": self._generate_examples(0, 2000),
            "validation": self._generate_examples(2000, 30)}

  def _generate_examples(self, start, count):
    for i in range(start, start + count):
      image = np.zeros((4, 4, 3), np.uint8)
      image[0, 0, 0], image[0, 1, 0] = i % 256, i // 256
      objects = 3 + i % 8
      depths = [[0.0, 0.0, 7.5 + (i % 7) / 2 + 3.0 * k] for k in range(objects)]
      yield i, {"image": image, "objects": {"size": [0] * objects, "pixel_coords": depths}}


def example_index(encoded) -> int:
  pixels = tf.io.decode_png(encoded).numpy()
  return int(pixels[0, 0, 0]) + 256 * int(pixels[0, 1, 0])


def expected_count_label(index):
  return index % 8  # (3 + i % 8) objects - 3


@pytest.fixture(scope="module")
def fake_clevr(tmp_path_factory):
  data_dir = str(tmp_path_factory.mktemp("tfds"))
  VtabFakeClevr(data_dir=data_dir).download_and_prepare()
  return data_dir


@pytest.fixture(name="clevr_task")
def fixture_clevr_task(monkeypatch, fake_clevr):
  """vtab/clevr_count, read from the fake dataset."""
  task = dataclasses.replace(vtab_tasks.TASKS["clevr_count"], tfds_name="vtab_fake_clevr",
                             reference_version="1.*.*")
  monkeypatch.setitem(vtab_tasks.TASKS, "clevr_count", task)
  return fake_clevr


def test_the_19_tasks_and_their_groups():
  assert [vtab_tasks.group_tasks(g) for g in vtab_tasks.GROUPS] == [
      ("caltech101", "cifar100", "dtd", "oxford_flowers102", "oxford_iiit_pet", "sun397",
       "svhn"),
      ("patch_camelyon", "eurosat", "resisc45", "diabetic_retinopathy"),
      ("clevr_count", "clevr_distance", "dmlab", "dsprites_location", "dsprites_orientation",
       "kitti_distance", "smallnorb_azimuth", "smallnorb_elevation")]
  classes = {name: task.num_classes for name, task in vtab_tasks.TASKS.items()}
  assert classes == {
      "caltech101": 102, "cifar100": 100, "dtd": 47, "oxford_flowers102": 102,
      "oxford_iiit_pet": 37, "sun397": 397, "svhn": 10, "patch_camelyon": 2, "eurosat": 10,
      "resisc45": 45, "diabetic_retinopathy": 5, "clevr_count": 8, "clevr_distance": 6,
      "dmlab": 6, "dsprites_location": 16, "dsprites_orientation": 16, "kitti_distance": 4,
      "smallnorb_azimuth": 18, "smallnorb_elevation": 9}
  for task in vtab_tasks.TASKS.values():
    assert not task.class_names or len(task.class_names) == task.num_classes, task.name
  assert vtab_tasks.TASKS["diabetic_retinopathy"].tfds_name.endswith("/btgraham-300")


def test_class_counts_match_the_tfds_features(tmp_path):
  """Tasks labelled by a TFDS class feature have that feature's class count."""
  for task in vtab_tasks.TASKS.values():
    if task.label_fn is None:
      builder = tfds.builder(task.tfds_name, data_dir=str(tmp_path))
      assert len(vtab_tasks.class_names(task, builder)) == task.num_classes, task.name
  wrong = dataclasses.replace(vtab_tasks.TASKS["dtd"], num_classes=40)
  with pytest.raises(ValueError, match="TFDS dtd feature 'label' has 47 classes, expected 40"):
    vtab_tasks.class_names(wrong, tfds.builder("dtd", data_dir=str(tmp_path)))


COUNTS = {  # TFDS split sizes of the prepared datasets
    "cifar100": {"train": 50_000, "test": 10_000},
    "oxford_iiit_pet": {"train": 3_680, "test": 3_669},
    "dtd": {"train": 1_880, "validation": 1_880, "test": 1_880},
    "eurosat": {"train": 27_000},
    "dsprites_location": {"train": 737_280},
    "clevr_count": {"train": 70_000, "validation": 15_000, "test": 15_000},
    "smallnorb_elevation": {"train": 24_300, "test": 24_300},
}
EXPECTED = {  # (val200, test); train800 is train[:800] throughout
    "cifar100": ("train[45000:45200]", "test"),
    "oxford_iiit_pet": ("train[2944:3144]", "test"),
    "dtd": ("validation[:200]", "test"),
    "eurosat": ("train[16200:16400]", "train[21600:]"),
    "dsprites_location": ("train[589824:590024]", "train[663552:]"),
    "clevr_count": ("train[63000:63200]", "validation"),
    "smallnorb_elevation": ("test[:200]", "test[50%:]"),
}


@pytest.mark.parametrize("name", EXPECTED)
def test_split_definitions(name):
  val200, test = EXPECTED[name]
  assert vtab_tasks.tfds_splits(vtab_tasks.TASKS[name], COUNTS[name]) == {
      "train800": "train[:800]", "val200": val200,
      "train800val200": f"train[:800]+{val200}", "test": test}


def test_too_small_dataset_is_refused():
  with pytest.raises(ValueError, match="dtd: TFDS dtd split 'validation' has 150, needs at "
                     "least 200 examples"):
    vtab_tasks.tfds_splits(vtab_tasks.TASKS["dtd"], {"train": 900, "validation": 150, "test": 9})
  with pytest.raises(ValueError, match="train split has 900 examples, too few for val200"):
    vtab_tasks.tfds_splits(vtab_tasks.TASKS["cifar100"], {"train": 900, "test": 9})


def label(task, **example):
  return int(vtab_tasks.TASKS[task].label(example))


def objects(depths, **other):
  return {"pixel_coords": tf.constant([[0.0, 0.0, d] for d in depths]), **other}


def test_clevr_labels():
  assert label("clevr_count", objects={"size": tf.zeros([3], tf.int64)}) == 0
  assert label("clevr_count", objects={"size": tf.zeros([10], tf.int64)}) == 7
  # The closest object's depth, bucketed at (0, 8, 8.5, 9, 9.5, 10, 100]; bounds inclusive.
  depths = {7.9: 0, 8.0: 0, 8.01: 1, 8.5: 1, 8.7: 2, 9.2: 3, 9.9: 4, 10.0: 4, 12.0: 5,
            99.0: 5}
  for depth, expected in depths.items():
    assert label("clevr_distance", objects=objects([depth + 5, depth, depth + 1])) == expected


def kitti(types, depths):
  return label("kitti_distance", objects={
      "type": tf.constant(types, tf.int64),
      "location": tf.reshape(tf.constant([[1.0, 2.0, d] for d in depths], tf.float32),
                             [-1, 3])})


def test_kitti_closest_vehicle_distance():
  assert kitti([0, 1], [30.0, 7.0]) == 0  # a van at 7 m
  assert kitti([2, 0], [8.0, 50.0]) == 0  # a truck at 8 m: (-100, 8]
  assert kitti([3, 0], [2.0, 15.0]) == 1  # a pedestrian nearer does not count
  assert kitti([5, 1, 7], [1.0, 20.5, 3.0]) == 2  # cyclist, misc do not count either
  assert kitti([3, 6], [4.0, 5.0]) == 3  # no car, van or truck: the fourth class
  assert kitti([], []) == 3


def test_dsprites_16_bins_and_smallnorb_labels():
  x = [label("dsprites_location", label_x_position=tf.constant(v, tf.int64)) for v in range(32)]
  assert x == [v // 2 for v in range(32)]
  angle = [label("dsprites_orientation", label_orientation=tf.constant(v, tf.int64))
           for v in range(40)]
  assert angle == [int(v // 2.5) for v in range(40)]
  assert angle[:6] == [0, 0, 0, 1, 1, 2] and sorted(set(angle)) == list(range(16))
  example = {"label_azimuth": tf.constant(17, tf.int64),
             "label_elevation": tf.constant(4, tf.int64)}
  assert (label("smallnorb_azimuth", **example), label("smallnorb_elevation", **example)) == (17, 4)


def test_dsprites_pixels_are_scaled_to_255():
  binary = tf.constant(np.array([[[0], [1]], [[1], [0]]], np.uint8))
  image, _ = vtab_tasks.TASKS["dsprites_location"].features(
      {"image": tf.io.encode_png(binary), "label_x_position": tf.constant(5, tf.int64)})
  np.testing.assert_array_equal(tf.io.decode_png(image).numpy()[..., 0], [[0, 255], [255, 0]])


def vtab_config(name, train_split, eval_split, data_dir=None):
  config = make_config(f"vtab/{name}")
  config.train_split, config.eval_split, config.tfds_data_dir = train_split, eval_split, data_dir
  return config


@pytest.mark.parametrize("limit", [tfds_builder.IN_MEMORY_LIMIT_BYTES, 0], ids=["memory", "stream"])
def test_prepared_task_splits_and_labels(clevr_task, monkeypatch, limit):
  """A real prepared dataset: 800 / 200 / 1,000 examples, train800 and val200 disjoint,
  the label mapping applied to both splits, held in memory or streamed."""
  monkeypatch.setattr(tfds_builder, "IN_MEMORY_LIMIT_BYTES", limit)
  builder = tfds.builder("vtab_fake_clevr", data_dir=clevr_task)
  indices = {}
  for split in ("train800", "val200", "train800val200"):
    dataset = tf_pipeline.open_dataset(vtab_config("clevr_count", split, "test", clevr_task))
    assert isinstance(dataset.train, splits.StreamingSplit) == (limit == 0)
    expected = vtab_tasks.tfds_splits(vtab_tasks.TASKS["clevr_count"], {"train": 2000})[split]
    reference = builder.as_dataset(split=expected, decoders={"image": tfds.decode.SkipDecoding()})
    indices[split] = sorted(example_index(ex["image"]) for ex in reference)
    if limit:
      assert sorted(example_index(image) for image in dataset.train.data) == indices[split]
      assert list(dataset.train.labels) == [expected_count_label(example_index(image))
                                            for image in dataset.train.data]
    assert dataset.info.num_train == len(indices[split])
  assert [len(indices[s]) for s in ("train800", "val200", "train800val200")] == [800, 200, 1000]
  assert not set(indices["train800"]) & set(indices["val200"])
  assert indices["train800val200"] == sorted(indices["train800"] + indices["val200"])

  assert dataset.info.num_eval == 30 and dataset.info.class_names[0] == "3 objects"
  test_labels = np.concatenate([b["label"][b["mask"] > 0] for b in dataset.eval_batches(
      batch_size=8, process_index=0, process_count=1)])
  assert sorted(test_labels) == sorted(expected_count_label(i) for i in range(2000, 2030))
  batches = train(dataset, num_steps=3, batch_size=8)
  assert all(set(b["label"]) <= set(range(8)) for b in batches)
  assert batches[0]["image"].shape == (8, 16, 16, 3)


# Real TFDS feature specs (random values): the label code reads features that exist.
# (tfds's mock cannot make CLEVR's and KITTI's object sequences: see the next test.)
MOCKED = ["cifar100", "dtd", "dsprites_orientation", "smallnorb_azimuth", "dmlab", "eurosat"]


@pytest.mark.parametrize("name", MOCKED)
def test_tasks_read_real_feature_specs(monkeypatch, name):
  monkeypatch.setattr(vtab_tasks, "split_counts", lambda builder: {
      "train": 100_000, "validation": 10_000, "test": 10_000})
  with tfds.testing.mock_data(num_examples=6, policy=tfds.testing.MockPolicy.USE_CODE):
    dataset = tf_pipeline.open_dataset(vtab_config(name, "train800", "val200"))
    batch = train(dataset, num_steps=1, batch_size=6)[0]
  task = vtab_tasks.TASKS[name]
  assert dataset.info.num_classes == task.num_classes
  labels = np.concatenate([dataset.train.labels, dataset.eval.labels])
  assert labels.min() >= 0 and labels.max() < task.num_classes
  assert batch["image"].shape == (6, 16, 16, 3)


def test_object_features_of_clevr_and_kitti(tmp_path):
  """The features the derived labels read, in the real specs: KITTI's vehicle types are
  its first three classes."""
  clevr = tfds.builder("clevr", data_dir=str(tmp_path)).info.features["objects"]
  assert clevr["pixel_coords"].shape == (3,) and "size" in clevr
  kitti = tfds.builder("kitti", data_dir=str(tmp_path)).info.features["objects"]
  assert kitti["location"].shape == (3,)
  assert kitti["type"].names[:vtab_tasks.KITTI_VEHICLE_TYPES] == ["Car", "Van", "Truck"]


def test_unknown_task_and_split_are_one_line():
  with pytest.raises(ValueError, match=r"^unknown VTAB task 'clevr_cont'; did you mean "
                     r"clevr_count.*\? tasks: caltech101, cifar100, .*smallnorb_elevation$"):
    tf_pipeline.open_dataset(vtab_config("clevr_cont", "train800", "test"))
  with pytest.raises(ValueError, match=r"config.train_split='train\[:98%\]' is not a VTAB-1k "
                     "split; use one of train800, val200, train800val200, test"):
    tf_pipeline.open_dataset(vtab_config("dtd", "train[:98%]", "test"))


def fake_pets(version):
  """A builder named vtab_fake_pets at `version`, with 1,000 train examples."""
  class Builder(tfds.core.GeneratorBasedBuilder, skip_registration=True):
    name = "vtab_fake_pets"
    VERSION = tfds.core.Version(version)

    def _info(self):
      return tfds.core.DatasetInfo(builder=self, features=tfds.features.FeaturesDict({
          "image": tfds.features.Image(shape=(4, 4, 3)),
          "label": tfds.features.ClassLabel(num_classes=37)}))

    def _split_generators(self, dl_manager):
      return {"train": self._generate_examples(), "test": self._generate_examples()}

    def _generate_examples(self):
      for i in range(1000):
        yield i, {"image": np.full((4, 4, 3), i % 256, np.uint8), "label": i % 37}
  return Builder


def test_tasks_load_the_benchmarks_version_where_tfds_can(tmp_path, monkeypatch, caplog):
  # TFDS 4.9 builds KITTI 3.1.0 (the reference's) though its default is 3.3.0.
  builder, why_not = vtab_tasks.task_builder(vtab_tasks.TASKS["kitti_distance"], str(tmp_path))
  assert (str(builder.version), why_not) == ("3.1.0", "")
  assert tfds_builder.build_name(builder) == "kitti:3.1.0"  # what the not-prepared error says
  # Pets 3.*.* it cannot build: when none is prepared, its default, and one line why.
  builder, why_not = vtab_tasks.task_builder(vtab_tasks.TASKS["oxford_iiit_pet"], str(tmp_path))
  assert str(builder.version) == "4.0.0" and "\n" not in why_not
  assert why_not.startswith("using TFDS oxford_iiit_pet 4.0.0, not the benchmark's 3.*.*: ")
  # A version that the installed TFDS has no code for is read when it is prepared.
  pets = dataclasses.replace(vtab_tasks.TASKS["oxford_iiit_pet"], tfds_name="vtab_fake_pets")
  monkeypatch.setitem(vtab_tasks.TASKS, "oxford_iiit_pet", pets)
  installed = fake_pets("4.0.0")  # the code the installed TFDS has
  monkeypatch.setattr(tfds.core.registered, "_DATASET_REGISTRY",
                      {**tfds.core.registered._DATASET_REGISTRY, installed.name: installed})
  assert vtab_tasks.task_version("vtab/oxford_iiit_pet", str(tmp_path))["tfds_version"] == "4.0.0"
  fake_pets("3.2.0")(data_dir=str(tmp_path)).download_and_prepare()
  assert vtab_tasks.task_version("vtab/oxford_iiit_pet", str(tmp_path)) == {
      "tfds_version": "3.2.0", "reference_version": "3.*.*"}
  with caplog.at_level("WARNING"):
    train_split, _, _ = vtab_tasks.open_task(vtab_config("oxford_iiit_pet", "train800", "test",
                                                   str(tmp_path)))
  assert len(train_split) == 800 and "benchmark" not in caplog.text


def test_missing_tfds_data_is_the_tfds_error(tmp_path):
  with pytest.raises(FileNotFoundError, match=r"^TFDS dataset dtd is not prepared in .*; "
                     r"run `tfds build dtd:3.0.1 --data_dir="):
    tf_pipeline.open_dataset(vtab_config("dtd", None, None, str(tmp_path)))
  with pytest.raises(FileNotFoundError, match="diabetic_retinopathy_detection is not prepared.*"
                     "TFDS cannot download it by itself"):
    tf_pipeline.open_dataset(vtab_config("diabetic_retinopathy", None, None, str(tmp_path)))


def test_vtab_preset_of_the_main_job():
  config = config_defaults.finetune_config("ViT-B_16", "vtab/clevr_count")
  assert (config.train_split, config.eval_split, config.total_steps, config.base_lr) == (
      "train800val200", "test", 2500, 0.01)


def test_directory_draw():
  draw = vtab_tasks.directory_indices(1500)
  assert [len(draw[s]) for s in ("train800", "val200", "train800val200")] == [800, 200, 1000]
  assert not set(draw["train800"]) & set(draw["val200"])
  np.testing.assert_array_equal(np.sort(np.concatenate([draw["train800"], draw["val200"]])),
                                draw["train800val200"])
  assert all(np.array_equal(draw[s], vtab_tasks.directory_indices(1500)[s]) for s in draw)
  assert not np.array_equal(draw["train800"], np.arange(800))
  with pytest.raises(ValueError, match="draws 800 train \\+ 200 validation images from "
                     "/data/x/train, which has 999: add images"):
    vtab_tasks.directory_indices(999, "/data/x")


def test_directory_task(tmp_path, monkeypatch):
  monkeypatch.setattr(vtab_tasks, "NUM_TRAIN", 8)
  monkeypatch.setattr(vtab_tasks, "NUM_VAL", 2)
  for i in range(12):
    write_image(tmp_path / "train" / ("a" if i < 6 else "b") / f"{i}.png")
  for i in range(3):
    write_image(tmp_path / "test" / "b" / f"t{i}.png")
  config = make_config(str(tmp_path))
  sizes = {}
  for split in ("train800", "val200", "train800val200"):
    config.train_split, config.eval_split = split, "test"
    dataset = tf_pipeline.open_dataset(config)
    sizes[split] = (dataset.info.num_train, dataset.info.num_eval)
    assert dataset.info.class_names == ["a", "b"]
  assert sizes == {"train800": (8, 3), "val200": (2, 3), "train800val200": (10, 3)}
  config.train_split, config.eval_split = "train[:98%]", "test"  # no VTAB split: all of it
  assert tf_pipeline.open_dataset(config).info.num_train == 12
