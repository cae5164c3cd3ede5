"""TFDS coco_captions (COCO 2014 in Karpathy's splits: train, val, test, restval; five or so
captions per image), the data of big_vision's image-text recipes on COCO. Both loaders
read it through tfds.data_source, the split prepared in TFDS's array_record format: an
example's image and its captions are read by index when a batch needs them (the tf stack
gathers rows in numpy too), so no split is held in memory. It has no classes: labels
are zeros, and the captions are every caption of an example (a train step draws one)."""

import re

import numpy as np

from vit_jax.base import errors
from vit_jax.data import fingerprint
from vit_jax.data.sources import lazy_rows, source_contract
from vit_jax.data.splits import IndexedSplit

NAME = "coco_captions"
TRAIN_SPLIT, EVAL_SPLIT = "train", "val"  # big_vision's: it trains on train, retrieves on val


def is_coco(name: str) -> bool:
  """'coco_captions', with a config ('coco_captions/2014') or version (':1.1.0') or not."""
  return re.split(r"[/:]", name, maxsplit=1)[0] == NAME


class Images(lazy_rows.Rows):
  """The encoded images of a split, by index (a TFDS data source; it pickles)."""

  def __init__(self, source):
    self.source = source

  def __len__(self):
    return len(self.source)

  def read(self, index: int) -> bytes:
    return self.source[index]["image"]


class Captions:
  """Every caption of an example, by index (read from its record when asked)."""

  def __init__(self, source):
    self.source = source

  def __len__(self):
    return len(self.source)

  def of(self, index: int):
    return [text.decode("utf-8") for text in self.source[int(index)]["captions"]["text"]]


def _builder(name: str, config):
  """The builder of `name` as prepared in config.tfds_data_dir; when it is not and
  config.tfds_download asks, prepared there as array_record first (COCO's files come from
  cocodataset.org: about 20 GB)."""
  import tensorflow_datasets as tfds  # pylint: disable=import-outside-toplevel
  try:
    builder = tfds.builder(name, data_dir=config.tfds_data_dir)
    if config.tfds_download and not builder.is_prepared():
      builder = tfds.builder(name, data_dir=config.tfds_data_dir, file_format="array_record")
      from vit_jax.data.sources import tfds_builder  # pylint: disable=import-outside-toplevel
      tfds_builder.prepare(builder, config.tfds_manual_dir)
  except ValueError as e:  # tfds: an unknown config or version
    raise errors.InvalidInput(f"cannot open TFDS dataset {name!r} "
                              f"({' '.join(str(e).split())[:200]})") from None
  return builder


def open_split(builder, split: str, data_dir=None) -> IndexedSplit:
  """One split (a TFDS split string: 'train+restval' too) read by index; one line when it
  is not prepared as array_record (told from the folder: tfds would look for it on GCS)."""
  import tensorflow_datasets as tfds  # pylint: disable=import-outside-toplevel
  prepared = builder.is_prepared()
  file_format = str(getattr(builder.info.file_format, "value", "")) if prepared else ""
  if file_format != "array_record":
    state = f"prepared as {file_format}" if prepared else "not prepared"
    raise FileNotFoundError(
        f"TFDS {builder.name} is {state} in {builder.data_dir}; run tfds build "
        f"{builder.name} --file_format=array_record --data_dir=DIR and set "
        "config.tfds_data_dir=DIR (or set config.tfds_download=True)")
  splits = list(builder.info.splits)
  if re.split(r"[\[+]", split)[0] not in splits:
    raise errors.InvalidInput(f"{builder.name} has no split {split!r} (it has "
                              f"{', '.join(sorted(splits))}); set config.train_split / "
                              "eval_split to one of them")
  name, version = builder.info.full_name.rsplit("/", 1)  # the version the builder reads
  source = tfds.data_source(f"{name}:{version}", split=split, data_dir=data_dir,
                            decoders={"image": tfds.decode.SkipDecoding()})
  found = fingerprint.of_tfds(fingerprint.tfds_identity(builder, split), len(source))
  return IndexedSplit(Images(source), np.zeros(len(source), np.int32), "encoded",
                      source=f"TFDS {builder.name} {split}", captions=Captions(source),
                      # the version's (fingerprint then reads none; a change is the version's)
                      fingerprint={**found, "captions": "in the TFDS version"})


class CocoCaptions:
  """config.dataset='coco_captions' (train split 'train', eval split 'val' unless
  config.train_split / eval_split say otherwise), read by either loader."""
  loaders = ("grain", "tf")
  takes_label_feature = False

  def handles(self, config) -> bool:
    return is_coco(config.dataset)

  def open(self, config, loader):
    builder = _builder(config.dataset, config)
    return (open_split(builder, config.train_split or TRAIN_SPLIT, config.tfds_data_dir),
            open_split(builder, config.eval_split or EVAL_SPLIT, config.tfds_data_dir), [])

  def class_count(self, config) -> int:
    return 0

  def open_eval(self, name, split, config, label_feature, loader):
    if not is_coco(name):
      return None
    source_contract.labels_only(name, label_feature)
    return open_split(_builder(name, config), split, config.tfds_data_dir), []


SOURCE = CocoCaptions()
