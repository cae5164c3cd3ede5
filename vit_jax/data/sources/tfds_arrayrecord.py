"""TFDS datasets for the Grain loader, through tfds.data_source: random access to a split
prepared in TFDS's array_record format, without TensorFlow (TFDS imports it only for
tf.data). Labels are read once when opened; images are read, undecoded, by index."""

import re
from typing import List, Optional

import numpy as np

from vit_jax.base import errors
from vit_jax.data import fingerprint
from vit_jax.data.splits import IndexedSplit


class Images:
  """The encoded images of a TFDS data source, by index."""

  def __init__(self, source):
    self._source = source

  def __len__(self):
    return len(self._source)

  def __getitem__(self, index: int) -> bytes:
    return self._source[int(index)]["image"]


def open_builder(name: str, data_dir: Optional[str]):
  import tensorflow_datasets as tfds  # pylint: disable=import-outside-toplevel
  try:
    return tfds.builder(name, data_dir=data_dir)
  except Exception as e:  # pylint: disable=broad-except  # tfds raises several kinds
    raise errors.InvalidInput(f"unknown dataset {name!r}: not 'digits', not an existing "
                              f"directory and not a TFDS name ({type(e).__name__})") from None


def open_split(builder, split: str, label_feature: str = "label",
               data_dir: Optional[str] = None) -> IndexedSplit:
  """One split as an IndexedSplit of encoded images; one line when it is not prepared in
  the array_record format."""
  import tensorflow_datasets as tfds  # pylint: disable=import-outside-toplevel
  splits = list(builder.info.splits) if builder.is_prepared() else []
  if splits and re.split(r"[\[+]", split)[0] not in splits:  # "train[:80%]": its base
    raise errors.InvalidInput(f"TFDS dataset {builder.name} has no split {split!r} (it has "
                              f"{', '.join(sorted(splits))}); set config.train_split / "
                              "eval_split to one of them")
  try:
    source = tfds.data_source(builder.name, split=split, data_dir=data_dir,
                              decoders={"image": tfds.decode.SkipDecoding()})
  except Exception as e:  # pylint: disable=broad-except  # not prepared, or as TFRecords
    raise FileNotFoundError(
        f"TFDS dataset {builder.name} split {split} is not prepared as array_record in "
        f"{data_dir or 'the default TFDS folder'} ({' '.join(str(e).split())[:120]}); run "
        f"tfds build {builder.name} --file_format=array_record, or set "
        "config.loader='tf'") from None
  labels = np.array([source[i][label_feature] for i in range(len(source))], np.int32)
  return IndexedSplit(Images(source), labels, "encoded", source=f"{builder.name} {split}",
                      fingerprint=fingerprint.of_tfds(
                          fingerprint.tfds_identity(builder, split), len(labels)))


def class_names(builder, label_feature: str = "label") -> List[str]:
  feature = builder.info.features[label_feature]
  if not hasattr(feature, "names"):
    raise errors.InvalidInput(f"{builder.name}: feature {label_feature!r} is not a class "
                              "label; the Grain loader reads ClassLabel features only")
  return list(feature.names)


def tfds_source(name: str, train_split: str, eval_split: str, *, label_feature="label",
                data_dir=None):
  """(train, eval, class names) of a prepared TFDS dataset."""
  builder = open_builder(name, data_dir)
  names = class_names(builder, label_feature)
  return (open_split(builder, train_split, label_feature, data_dir),
          open_split(builder, eval_split, label_feature, data_dir), names)


def tfds_eval_source(name: str, split: str, *, label_feature="label", data_dir=None):
  builder = open_builder(name, data_dir)
  return (open_split(builder, split, label_feature, data_dir),
          class_names(builder, label_feature))
