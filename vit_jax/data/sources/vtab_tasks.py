"""VTAB-1k (Zhai et al. 2019): what each of the 19 tasks is.

A task is a TFDS dataset, a label read off its features, and four splits: `train800`
and `val200` (model selection), `train800val200` (the final run's 1,000 training
examples) and `test`. The definitions are those of google-research/task_adaptation,
which the ViT paper followed:
  * train800 is always `train[:800]`;
  * val200 is the first 200 examples of the dataset's validation split; datasets without
    one carve it out of train at a fixed percentage (val200 = the 200 examples starting
    at floor(p% of train), the start of the reference's validation part), SmallNORB
    takes it from the start of its test split;
  * train800val200 is the two concatenated;
  * test is the official test split (CLEVR: its validation split, the test split has no
    labels); datasets with a train split only (EuroSAT, RESISC45, dSprites) use the part
    of train after their train and validation percentages; SmallNORB the second half of
    its test split.
Labels: the dataset's own class label, except CLEVR count (objects - 3), CLEVR distance
and KITTI distance (buckets of the closest object's / vehicle's depth), dSprites x
position and orientation (32 and 40 values in 16 bins) and SmallNORB azimuth / elevation.

`config.dataset = 'vtab/<task>'` opens a task through
vit_jax.data.tf_stack.tf_pipeline.open_dataset,
with config.train_split / eval_split naming VTAB splits (default train800val200 / test).
An image directory (train/<class>/, test/<class>/) read with VTAB split names is a custom
task: 800 + 200 images drawn from train/ with a fixed seed, all of test/ as its test.
"""

import dataclasses
import difflib
import os
from typing import Callable, Dict, Mapping, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf

from vit_jax.base import errors
from vit_jax.base.console import log
from vit_jax.data import VTAB_PREFIX as PREFIX
from vit_jax.data.sources import image_folder, tfds_builder
from vit_jax.data.splits import IndexedSplit

GROUPS = ("natural", "specialized", "structured")
CUSTOM_GROUP = "custom"  # image directories: in the overall mean, in no VTAB group
SPLITS = ("train800", "val200", "train800val200", "test")
DEFAULT_SPLITS = ("train800val200", "test")  # the final run's (train, eval)
NUM_TRAIN, NUM_VAL = 800, 200
DIRECTORY_SEED = 0  # draws a directory's 800 + 200 images from its train/

# Depth thresholds (task_adaptation): the label is the index of the last threshold below
# the depth, so CLEVR gives 6 classes and KITTI 3 distances plus 'no vehicle' (> 999).
CLEVR_DISTANCE_THRESHOLDS = (0.0, 8.0, 8.5, 9.0, 9.5, 10.0, 100.0)
KITTI_DISTANCE_THRESHOLDS = (-100.0, 8.0, 20.0, 999.0)
KITTI_VEHICLE_TYPES = 3  # KITTI object types 0, 1, 2: Car, Van, Truck
KITTI_NO_VEHICLE_DEPTH = 1000.0
CLEVR_MIN_OBJECTS = 3  # CLEVR scenes hold 3 to 10 objects: count label = objects - 3
DSPRITES_BINS = 16


def bucket(value: tf.Tensor, thresholds: Sequence[float]) -> tf.Tensor:
  """Index of the last of the ascending `thresholds` strictly below `value` (int32)."""
  below = tf.constant(thresholds, value.dtype) < value
  return tf.reduce_sum(tf.cast(below, tf.int32)) - 1


def clevr_count(example: dict) -> tf.Tensor:
  return tf.size(example["objects"]["size"], out_type=tf.int32) - CLEVR_MIN_OBJECTS


def clevr_distance(example: dict) -> tf.Tensor:
  """Bucket of the closest object's depth (pixel_coords[:, 2])."""
  return bucket(tf.reduce_min(example["objects"]["pixel_coords"][:, 2]),
                CLEVR_DISTANCE_THRESHOLDS)


def kitti_distance(example: dict) -> tf.Tensor:
  """Bucket of the closest vehicle's depth (location[:, 2], metres); 3 = no vehicle."""
  objects = example["objects"]
  vehicles = objects["type"] < KITTI_VEHICLE_TYPES
  depths = tf.boolean_mask(objects["location"][:, 2], vehicles)
  closest = tf.reduce_min(tf.concat([depths, [KITTI_NO_VEHICLE_DEPTH]], axis=0))
  return bucket(closest, KITTI_DISTANCE_THRESHOLDS)


def binned(feature: str, num_values: int, bins: int = DSPRITES_BINS) -> Callable:
  """Label = floor(value / (num_values / bins)): neighbouring values share a class."""
  width = num_values / bins

  def label(example: dict) -> tf.Tensor:
    value = tf.cast(example[feature], tf.float32)
    return tf.cast(tf.math.floordiv(value, width), tf.int32)
  return label


def scale_binary_image(encoded: tf.Tensor) -> tf.Tensor:
  """dSprites stores pixels as 0 / 1: re-encoded as 0 / 255 (grayscale PNG)."""
  return tf.io.encode_png(tf.io.decode_png(encoded, channels=1) * 255)


@dataclasses.dataclass(frozen=True)
class Task:
  """One VTAB-1k task. Splits (see the module docstring): val200 comes from `val_split`,
  at `train_percents[0]`% of train when that is 'train'; `test_split` is a TFDS split
  string, or '' for the rest of train after sum(train_percents)% (floors added)."""
  name: str
  group: str
  tfds_name: str  # builder[/config]
  num_classes: int
  val_split: str = "validation"
  test_split: str = "test"
  train_percents: Tuple[int, ...] = ()
  label_feature: str = "label"  # the TFDS feature read as the label (and its names)
  label_fn: Optional[Callable[[dict], tf.Tensor]] = None  # derived labels
  class_names: Tuple[str, ...] = ()  # derived labels' names ('' : the feature's names)
  image_fn: Optional[Callable[[tf.Tensor], tf.Tensor]] = None  # encoded -> encoded
  # Train augmentation (BiT: omit what destroys the label): random crops for tasks whose
  # label survives losing the image borders, flips where a mirror image keeps its label.
  crop: bool = True
  flip: bool = True
  # The TFDS version (pattern) task_adaptation reads: loaded where TFDS can (see builder).
  reference_version: str = ""

  def label(self, example: dict) -> tf.Tensor:
    if self.label_fn is not None:
      return tf.cast(self.label_fn(example), tf.int32)
    return tf.cast(example[self.label_feature], tf.int32)

  def features(self, example: dict) -> Tuple[tf.Tensor, tf.Tensor]:
    """(encoded image, int32 label) of a TFDS example, at read time."""
    image = example["image"]
    if self.image_fn is not None:
      image = self.image_fn(image)
    return image, self.label(example)


def _bucket_names(thresholds: Sequence[float], unit: str = "") -> Tuple[str, ...]:
  return tuple(f"({low:g}, {high:g}]{unit}" for low, high in zip(thresholds, thresholds[1:]))


_NO_CROP = dict(crop=False)  # structured tasks: counts, positions and depths need the borders
_NO_CROP_OR_FLIP = dict(crop=False, flip=False)  # and mirroring changes positions / angles

TASKS: Dict[str, Task] = {task.name: task for task in (
    # Natural.
    Task("caltech101", "natural", "caltech101", 102, "train", train_percents=(90,),
         reference_version="3.*.*"),
    Task("cifar100", "natural", "cifar100", 100, "train", train_percents=(90,),
         reference_version="3.*.*"),
    Task("dtd", "natural", "dtd", 47, reference_version="3.*.*"),
    Task("oxford_flowers102", "natural", "oxford_flowers102", 102, reference_version="2.*.*"),
    Task("oxford_iiit_pet", "natural", "oxford_iiit_pet", 37, "train", train_percents=(80,),
         reference_version="3.*.*"),
    Task("sun397", "natural", "sun397/tfds", 397, reference_version="4.*.*"),
    Task("svhn", "natural", "svhn_cropped", 10, "train", train_percents=(90,),
         reference_version="3.*.*"),
    # Specialized.
    Task("patch_camelyon", "specialized", "patch_camelyon", 2, reference_version="2.*.*"),
    Task("eurosat", "specialized", "eurosat/rgb", 10, "train", "", (60, 20),
         reference_version="2.*.*"),
    Task("resisc45", "specialized", "resisc45", 45, "train", "", (60, 20),
         reference_version="3.*.*"),
    Task("diabetic_retinopathy", "specialized", "diabetic_retinopathy_detection/btgraham-300",
         5, reference_version="3.*.*"),
    # Structured.
    Task("clevr_count", "structured", "clevr", 8, "train", "validation", (90,),
         label_fn=clevr_count, reference_version="3.*.*", **_NO_CROP,
         class_names=tuple(f"{n} objects" for n in range(3, 11))),
    Task("clevr_distance", "structured", "clevr", 6, "train", "validation", (90,),
         label_fn=clevr_distance, class_names=_bucket_names(CLEVR_DISTANCE_THRESHOLDS),
         reference_version="3.*.*", **_NO_CROP),
    Task("dmlab", "structured", "dmlab", 6, reference_version="2.0.1", **_NO_CROP),
    Task("dsprites_location", "structured", "dsprites", DSPRITES_BINS, "train", "", (80, 10),
         label_fn=binned("label_x_position", 32), image_fn=scale_binary_image,
         class_names=tuple(f"x bin {i}" for i in range(DSPRITES_BINS)),
         reference_version="2.*.*", **_NO_CROP_OR_FLIP),
    Task("dsprites_orientation", "structured", "dsprites", DSPRITES_BINS, "train", "", (80, 10),
         label_fn=binned("label_orientation", 40), image_fn=scale_binary_image,
         class_names=tuple(f"orientation bin {i}" for i in range(DSPRITES_BINS)),
         reference_version="2.*.*", **_NO_CROP_OR_FLIP),
    Task("kitti_distance", "structured", "kitti", 4, label_fn=kitti_distance,
         class_names=_bucket_names(KITTI_DISTANCE_THRESHOLDS, " m") + ("no vehicle",),
         reference_version="3.1.0", **_NO_CROP),
    Task("smallnorb_azimuth", "structured", "smallnorb", 18, "test", "test[50%:]",
         label_feature="label_azimuth", reference_version="2.*.*", **_NO_CROP_OR_FLIP),
    Task("smallnorb_elevation", "structured", "smallnorb", 9, "test", "test[50%:]",
         label_feature="label_elevation", reference_version="2.*.*", **_NO_CROP),
)}


def group_tasks(group: str) -> Tuple[str, ...]:
  return tuple(name for name, task in TASKS.items() if task.group == group)


def get_task(name: str) -> Task:
  """The task called `name`, or a one-line ValueError listing the valid names."""
  task = TASKS.get(name)
  if task is None:
    close = difflib.get_close_matches(name, list(TASKS), n=3)
    hint = f"did you mean {', '.join(close)}? " if close else ""
    raise errors.InvalidInput(f"unknown VTAB task {name!r}; {hint}tasks: {', '.join(TASKS)}")
  return task


# --- Splits -----------------------------------------------------------------------------


def _at_least(counts: Mapping[str, int], split: str, needed: int, task: Task) -> int:
  count = counts.get(split)
  if count is None or count < needed:
    have = "has none" if count is None else f"has {count}"
    raise errors.InvalidInput(
        f"VTAB task {task.name}: TFDS {task.tfds_name} split {split!r} {have}, "
        f"needs at least {needed} examples; is it the right dataset version?")
  return count


def tfds_splits(task: Task, counts: Mapping[str, int]) -> Dict[str, str]:
  """The TFDS split string of each VTAB split, given the dataset's split sizes."""
  train = _at_least(counts, "train", NUM_TRAIN, task)
  if task.val_split == "train":
    start = task.train_percents[0] * train // 100
    if start + NUM_VAL > train:
      raise errors.InvalidInput(
          f"VTAB task {task.name}: TFDS {task.tfds_name} train split has {train} "
          f"examples, too few for val200 at {start}")
    val200 = f"train[{start}:{start + NUM_VAL}]"
  else:
    _at_least(counts, task.val_split, NUM_VAL, task)
    val200 = f"{task.val_split}[:{NUM_VAL}]"
  test = task.test_split
  if not test:
    test = f"train[{sum(p * train // 100 for p in task.train_percents)}:]"
  train800 = f"train[:{NUM_TRAIN}]"
  return {"train800": train800, "val200": val200, "train800val200": f"{train800}+{val200}",
          "test": test}


def split_counts(builder) -> Dict[str, int]:
  """Examples per TFDS split of a prepared builder."""
  return {name: info.num_examples for name, info in builder.info.splits.items()}


def check_split(name: Optional[str], which: str) -> str:
  if name not in SPLITS:
    raise errors.InvalidInput(
        f"config.{which}={name!r} is not a VTAB-1k split; use one of "
        f"{', '.join(SPLITS)}")
  return name


def _config_splits(config) -> Tuple[str, str]:
  return (check_split(config.train_split or DEFAULT_SPLITS[0], "train_split"),
          check_split(config.eval_split or DEFAULT_SPLITS[1], "eval_split"))


# --- Opening a task -----------------------------------------------------------------------


def task_builder(task: Task, data_dir: Optional[str]) -> Tuple[object, str]:
  """(TFDS builder, '' or why it is not at the reference's version): the version
  task_adaptation reads where the installed TFDS can build it or finds it prepared in
  `data_dir`, else TFDS's default version (other versions can differ in their examples,
  splits or labels, so the results table records the version of every task)."""
  builder = tfds_builder.versioned_builder(task.tfds_name, task.reference_version, data_dir)
  if builder is not None:
    return builder, ""
  builder = tfds_builder.prepared_builder(task.tfds_name, data_dir=data_dir)
  return builder, (f"using TFDS {task.tfds_name} {builder.version}, not the benchmark's "
                   f"{task.reference_version}: the installed tensorflow-datasets cannot build "
                   f"{task.reference_version} and none is prepared in {builder.data_dir_root}")


def task_version(name: str, data_dir: Optional[str]) -> Dict[str, str]:
  """The TFDS version a task reads (with the reference's, and why they differ), for the
  results table; {} for an image directory."""
  if not name.startswith(PREFIX):
    return {}
  task = get_task(name[len(PREFIX):])
  builder, why_not = task_builder(task, data_dir)
  return {"tfds_version": str(builder.version), "reference_version": task.reference_version,
          **({"version_note": why_not} if why_not else {})}


def class_names(task: Task, builder) -> list:
  if task.class_names:
    return list(task.class_names)
  feature = builder.info.features[task.label_feature]
  if feature.num_classes != task.num_classes:
    raise errors.InvalidInput(
        f"VTAB task {task.name}: TFDS {builder.name} feature "
        f"{task.label_feature!r} has {feature.num_classes} classes, expected "
        f"{task.num_classes}; is it the right dataset version?")
  return list(feature.names)


def open_task(config):
  """(train split, eval split, class names) of a VTAB task (vit_jax.data.sources.vtab_1k
  tells one)."""
  train_name, eval_name = _config_splits(config)
  if not config.dataset.startswith(PREFIX):
    return open_directory(config.dataset, train_name, eval_name)
  task = get_task(config.dataset[len(PREFIX):])
  builder, why_not = task_builder(task, config.tfds_data_dir)
  if why_not:
    log.warning("VTAB task %s: %s", task.name, why_not)
  if config.tfds_download:
    tfds_builder.prepare(builder, config.tfds_manual_dir)
  tfds_builder.read_tfds(builder, "train")  # absent data: the one-line TFDS error, first
  splits = tfds_splits(task, split_counts(builder))
  names = class_names(task, builder)
  return (tfds_builder.tfds_split(builder, splits[train_name], task.features),
          tfds_builder.tfds_split(builder, splits[eval_name], task.features), names)


def directory_indices(num_train: int, root: str = "") -> Dict[str, np.ndarray]:
  """Indices into a directory's train/ images of train800, val200 and train800val200:
  a permutation drawn with DIRECTORY_SEED, first 800 and next 200 (sorted)."""
  needed = NUM_TRAIN + NUM_VAL
  if num_train < needed:
    raise errors.InvalidInput(
        f"VTAB-1k draws {NUM_TRAIN} train + {NUM_VAL} validation images from "
        f"{os.path.join(root, 'train')}, which has {num_train}: add images, or "
        "fine-tune on it as a plain dataset (python -m vit_jax.main)")
  order = np.random.default_rng(DIRECTORY_SEED).permutation(num_train)
  train, val = np.sort(order[:NUM_TRAIN]), np.sort(order[NUM_TRAIN:needed])
  return {"train800": train, "val200": val, "train800val200": np.sort(order[:needed])}


def open_directory(root: str, train_name: str, eval_name: str):
  """A directory as a custom VTAB task: train/ gives the 1,000 selection images (see
  directory_indices), test/ (or validation/) all of the test split."""
  train, test, classes = image_folder.directory_source(root)
  indices = directory_indices(len(train), root)

  def split(name):
    if name == "test":
      return test
    return IndexedSplit(train.data[indices[name]], train.labels[indices[name]], train.kind,
                        train.source)
  return split(train_name), split(eval_name), classes
