"""What every data source answers (Source), so that the registry finds the one that reads
a config.dataset and neither input stack nor command asks which kind it is; and the small
checks the sources share. A source module defines SOURCE, an object of this shape."""

import os
from typing import List, Optional, Protocol, Tuple, runtime_checkable

from vit_jax.base import errors

# (train split, eval split, class names): what opening a dataset gives (splits.py's types).
Opened = Tuple[object, object, List[str]]


@runtime_checkable
class Source(Protocol):
  """One kind of dataset. `loader` names the input stack that reads what it opens: 'tf'
  (tf.data) or 'grain' (vit_jax.data.loaders)."""

  # The stacks that read it; the first reads it for a command with no config.loader (fewshot).
  loaders: Tuple[str, ...]
  # Whether config.label_feature (a TFDS feature) can pick its labels.
  takes_label_feature: bool

  def handles(self, config) -> bool:
    """Whether it reads config.dataset, told from the name and files alone (no example read,
    no TensorFlow imported)."""

  def open(self, config, loader: str) -> Opened:
    """config.dataset's splits and class names as `loader` reads them; a loader not in
    `loaders` is one line saying which to set."""

  def class_count(self, config) -> int:
    """The number of classes of config.dataset from its metadata alone."""

  def open_eval(self, name: str, split: str, config, label_feature: str,
                loader: str) -> Optional[Tuple[object, List[str]]]:
    """(split, class names) of the evaluation-only set `name`, or None: not its kind."""


def is_path(name: str) -> bool:
  """Whether a dataset name is a folder (an existing directory, or written as a path)."""
  return os.path.isdir(os.path.expanduser(name)) or name.startswith(("/", "./", "../", "~"))


def label_feature(config) -> str:
  return config.get("label_feature", "label")


def labels_only(name: str, feature: str) -> None:
  """A source with its own labels refuses an evaluation set's label feature."""
  if feature != "label":
    raise errors.InvalidInput(f"{name}: a list of labels ({feature!r}) needs a TFDS dataset "
                              "with that feature")


def check_loader(source: Source, loader: str, refusal: str) -> None:
  """`refusal` (one line naming the loader to set) when `loader` does not read `source`."""
  if loader not in source.loaders:
    raise errors.InvalidInput(refusal)
