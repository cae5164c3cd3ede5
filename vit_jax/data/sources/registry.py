"""Which source reads a config.dataset: one object per kind, tried in order (SOURCES).

  * a VTAB-1k task: 'vtab/<task>', or a directory read with VTAB split names
    (vit_jax.data.sources.vtab_tasks);
  * 'digits': scikit-learn's embedded digits (vit_jax.data.sources.digits);
  * ArrayRecord shards: ROOT/arrayrecord.json (vit_jax.data.sources.arrayrecord; Grain loader);
  * a multi-label image directory: ROOT/train/labels.csv, ROOT/test/labels.csv
    (vit_jax.data.sources.multilabel_folder);
  * an image directory: ROOT/train/<class>/, ROOT/test/<class>/ (vit_jax.data.sources.image_folder);
  * otherwise a TFDS name (vit_jax.data.sources.tfds_builder), labelled by config.label_feature
    (a ClassLabel, or a list of them: multi-label).

Each answers `open(config)` -> (train split, eval split, class names), `class_count(config)`
from metadata alone, and `open_eval(name, split, config, label_feature)` -> (split, class
names) for an evaluation-only set (None: the kind serves no evaluation-only sets). A new
kind is one class here; the sources themselves import none of this.
"""

import os
from typing import List, Tuple

from vit_jax.base import errors
from vit_jax.data import VTAB_PREFIX, VTAB_SELECTIONS
from vit_jax.data.sources import arrayrecord, digits, image_folder, multilabel_folder
# tfds_builder and vtab_tasks import TensorFlow: loaded by the kinds that read through it only.


def _is_path(name: str) -> bool:
  return os.path.isdir(os.path.expanduser(name)) or name.startswith(("/", "./", "../", "~"))


def _labels_only(name: str, label_feature: str) -> None:
  if label_feature != "label":
    raise errors.InvalidInput(f"{name}: a list of labels ({label_feature!r}) needs a TFDS "
                              "dataset with that feature")


class VtabTask:
  def handles(self, config) -> bool:
    if not (config.dataset.startswith(VTAB_PREFIX)
            or {config.train_split, config.eval_split} & VTAB_SELECTIONS):
      return False  # told without importing vtab (TensorFlow)
    from vit_jax.data.sources import vtab_tasks
    return vtab_tasks.handles(config)

  def open(self, config):
    from vit_jax.data.sources import vtab_tasks
    return vtab_tasks.open_task(config)

  def class_count(self, config) -> int:
    if not config.dataset.startswith(VTAB_PREFIX):
      return Folder().class_count(config)
    from vit_jax.data.sources import vtab_tasks
    return vtab_tasks.get_task(config.dataset[len(VTAB_PREFIX):]).num_classes

  def open_eval(self, name, split, config, label_feature):
    return None


class Digits:
  def handles(self, config) -> bool:
    return config.dataset == "digits"

  def open(self, config):
    return digits.digits_source()

  def class_count(self, config) -> int:
    return len(digits.DIGITS_CLASSES)

  def open_eval(self, name, split, config, label_feature):
    if name != "digits":
      return None
    _labels_only(name, label_feature)
    _, evaluation, class_names = digits.digits_source()
    return evaluation, class_names


def _grain_only(name: str, config) -> None:
  if config.get("loader", "tf") != "grain":
    raise errors.InvalidInput(f"{name} holds ArrayRecord shards, which the Grain loader "
                              "reads: set config.loader='grain'")


class ArrayRecordFolder:
  def handles(self, config) -> bool:
    return _is_path(config.dataset) and arrayrecord.is_arrayrecord_dir(config.dataset)

  def open(self, config):
    _grain_only(config.dataset, config)
    return arrayrecord.arrayrecord_source(config.dataset, config.train_split, config.eval_split)

  def class_count(self, config) -> int:
    return len(arrayrecord.class_names(config.dataset))

  def open_eval(self, name, split, config, label_feature):
    if not (_is_path(name) and arrayrecord.is_arrayrecord_dir(name)):
      return None
    _grain_only(name, config)
    _labels_only(name, label_feature)
    _, evaluation, class_names = arrayrecord.arrayrecord_source(name, None, None)
    return evaluation, class_names


class MultilabelFolder:
  def handles(self, config) -> bool:
    return _is_path(config.dataset) and multilabel_folder.is_multilabel_folder(config.dataset)

  def open(self, config):
    return multilabel_folder.multilabel_source(config.dataset)

  def class_count(self, config) -> int:
    return len(multilabel_folder.class_names(config.dataset))

  def open_eval(self, name, split, config, label_feature):
    if not (_is_path(name) and multilabel_folder.is_multilabel_folder(name)):
      return None
    _labels_only(name, label_feature)
    _, evaluation, class_names = multilabel_folder.multilabel_source(name)
    return evaluation, class_names


class Folder:
  def handles(self, config) -> bool:
    return _is_path(config.dataset)

  def open(self, config):
    return image_folder.directory_source(config.dataset)

  def class_count(self, config) -> int:
    return len(image_folder.class_folders(
        os.path.join(os.path.expanduser(config.dataset), "train")))

  def open_eval(self, name, split, config, label_feature):
    if not _is_path(name):
      return None
    _labels_only(name, label_feature)
    _, evaluation, class_names = image_folder.directory_source(name)
    return evaluation, class_names


class Tfds:
  def handles(self, config) -> bool:
    return True

  def open(self, config):
    from vit_jax.data.sources import tfds_builder
    return tfds_builder.tfds_source(config.dataset, config.train_split or "train",
                                   config.eval_split or "test",
                                   label_feature=label_feature(config),
                                   data_dir=config.tfds_data_dir,
                                   manual_dir=config.tfds_manual_dir,
                                   download=config.tfds_download)

  def class_count(self, config) -> int:
    from vit_jax.data.sources import tfds_builder
    return tfds_builder.tfds_class_count(config.dataset, config.tfds_data_dir,
                                        label_feature(config))

  def open_eval(self, name, split, config, label_feature):
    from vit_jax.data.sources import tfds_builder
    return tfds_builder.tfds_eval_source(name, split, label_feature=label_feature,
                                        data_dir=config.tfds_data_dir,
                                        manual_dir=config.tfds_manual_dir,
                                        download=config.tfds_download)


# The first that handles a name reads it.
SOURCES = (VtabTask(), Digits(), ArrayRecordFolder(), MultilabelFolder(), Folder(), Tfds())


def label_feature(config) -> str:
  return config.get("label_feature", "label")


def find(config):
  source = next(source for source in SOURCES if source.handles(config))
  if label_feature(config) != "label" and not isinstance(source, Tfds):
    raise errors.InvalidInput(
        f"config.label_feature={label_feature(config)!r} applies to TFDS datasets only; "
        f"{config.dataset} has its own labels: drop the setting")
  return source


def open_source(config):
  """(train split, eval split, class names) of config.dataset (config.train_split /
  eval_split apply to TFDS and VTAB only)."""
  return find(config).open(config)


def class_count(config) -> int:
  """The number of classes of config.dataset from its metadata alone (no example read)."""
  return find(config).class_count(config)


def open_eval_source(name: str, split: str, config,
                     label_feature: str = "label") -> Tuple[object, List[str]]:
  """(split, class names) of an evaluation-only set: a TFDS split, or the eval split of
  'digits' or of a directory (whose test/ or validation/ folder is used; `split` is then
  ignored). TFDS location and download settings come from config.tfds_*."""
  opened = (source.open_eval(name, split, config, label_feature) for source in SOURCES)
  return next(found for found in opened if found is not None)  # Tfds takes any name
