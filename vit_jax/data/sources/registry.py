"""Which source reads a config.dataset: the one list of source modules (KINDS), tried in
order, each module's SOURCE answering source_contract.Source. A new kind of dataset is one
module and its name here; the stacks and commands ask the source, never its type.

  * vtab_1k: 'vtab/<task>', or a directory read with VTAB split names (tf.data only);
  * digits: scikit-learn's embedded digits;
  * captions_file: 'captions:PATH' or PATH.tsv / PATH.txt, IMAGE<TAB>CAPTION lines;
  * arrayrecord: ArrayRecord shards, ROOT/arrayrecord.json (Grain only);
  * webdataset: 'webdataset:PATTERN', PATTERN.tar or a folder of *.tar, local or gs://:
    WebDataset shards of KEY.jpg + KEY.txt (Grain only);
  * coco_captions: TFDS coco_captions, prepared as array_record;
  * multilabel_folder: ROOT/train/labels.csv, ROOT/test/labels.csv;
  * image_folder: ROOT/train/<class>/, ROOT/test/<class>/, or any name written as a path;
  * tfds_datasets: otherwise a TFDS name, labelled by config.label_feature.
"""

import importlib
from typing import List, Tuple

from vit_jax.base import errors
from vit_jax.data import captions
from vit_jax.data.sources import source_contract
from vit_jax.data.sources.source_contract import Source

# The first whose SOURCE handles a config reads it; tfds_datasets takes any name.
KINDS = ("vtab_1k", "digits", "captions_file", "arrayrecord", "webdataset", "coco_captions",
         "multilabel_folder", "image_folder", "tfds_datasets")


def sources() -> List[Source]:
  """Every kind's SOURCE, in KINDS order (each module imported by name; none imports
  TensorFlow until it opens a dataset)."""
  return [importlib.import_module(f"vit_jax.data.sources.{kind}").SOURCE for kind in KINDS]


def find(config) -> Source:
  """The source that reads config.dataset; config.label_feature only where it applies."""
  source = next(source for source in sources() if source.handles(config))
  feature = source_contract.label_feature(config)
  if feature != "label" and not source.takes_label_feature:
    raise errors.InvalidInput(
        f"config.label_feature={feature!r} applies to TFDS datasets only; "
        f"{config.dataset} has its own labels: drop the setting")
  return source


def open_source(config, *, loader: str) -> source_contract.Opened:
  """(train split, eval split, class names) of config.dataset as `loader` ('tf' or
  'grain') reads them (config.train_split / eval_split apply to TFDS, VTAB and shards),
  with captions made from class names where a contrastive run asks (captions.attach)."""
  return captions.attach(config, find(config).open(config, loader))


def class_count(config) -> int:
  """The number of classes of config.dataset from its metadata alone (no example read)."""
  return find(config).class_count(config)


def loader_for(config) -> str:
  """The loader that reads config.dataset for a command with no config.loader to set
  (fewshot): shards are read by Grain, the rest by tf.data."""
  return find(config).loaders[0]


def open_eval_source(name: str, split: str, config, label_feature: str = "label", *,
                     loader: str) -> Tuple[object, List[str]]:
  """(split, class names) of an evaluation-only set as `loader` reads it: a TFDS split, or
  the eval split of 'digits', of shards or of a directory (whose test/ or validation/
  folder is used; `split` is then ignored). TFDS location and download settings come from
  config.tfds_*."""
  opened = (source.open_eval(name, split, config, label_feature, loader)
            for source in sources())
  return next(found for found in opened if found is not None)  # tfds_datasets takes any name
