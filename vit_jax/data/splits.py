"""What a source hands the pipeline: an IndexedSplit (examples in memory or as file
paths, read by index in any order) or a StreamingSplit (a TFDS split too large for memory),
and the one-line error a bad image becomes. Kept apart from the sources so that the
pipeline depends on these types, not on any reader."""

import dataclasses
import os
import re
from typing import Callable, ClassVar, Dict, Optional, Tuple

import numpy as np

from vit_jax.base import errors


# What to do about a corrupt image file: removing it changes the data, which a resume
# refuses unless told (vit_jax.training.runs.dataset_record), so the advice says how.
FIX = ("replace it with a readable copy, or remove it (a run that already started then "
       "resumes with --config.allow_data_change=True)")


class CorruptImageError(errors.InvalidInput):
  """An image that cannot be decoded: the message names it and the fix, on one line."""


@dataclasses.dataclass
class IndexedSplit:
  """Examples readable by index in any order, which is what lets batches be independent
  of the process count. `kind` says what `data` holds: 'pixels' (uint8 [N, H, W, 3]),
  'encoded' (image bytes, object array) or 'files' (image paths as filesystem-encoded
  bytes, object array: tf.string takes bytes, and any name the filesystem allows
  round-trips, which numpy unicode arrays do not)."""
  data: np.ndarray
  labels: np.ndarray  # int32 [N], or multi-hot int32 [N, K] (several correct classes)
  kind: str
  source: str = ""  # what the examples are, for error messages (files name themselves)
  tfds_identity: Optional[Dict[str, str]] = None  # a whole TFDS split: its name, version, split
  # What the examples were made from, when they are read from a copy (ArrayRecord shards):
  # their source's fingerprint (vit_jax.data.fingerprint), which the split reports as its own.
  fingerprint: Optional[Dict[str, object]] = None

  def __len__(self):
    return len(self.labels)

  @property
  def multi_label(self) -> bool:
    return self.labels.ndim == 2

  def image_error(self, index: int, error: Exception) -> Exception:
    """The one-line error for example `index` failing with `error` (TF's message names
    no file): which image, why, and the fix."""
    reason = " ".join(re.sub(r"\{\{.*?\}\}|\[\[.*?\]\]|\[Op:.*", "", str(error),
                             flags=re.S).split()).rstrip(".")
    if self.kind != "files":
      return CorruptImageError(f"corrupt image: example {index} of {self.source or 'the data'}"
                               f": {reason}; rebuild the dataset")
    path = os.fsdecode(self.data[index])
    if isinstance(error, FileNotFoundError) or type(error).__name__ == "NotFoundError":
      return FileNotFoundError(f"image {path} disappeared after the dataset was opened; "
                               "restore it, or rerun to scan the folder again")
    return CorruptImageError(f"corrupt image {path}: {reason}; {FIX}")


def image_and_label(example: dict) -> Tuple[object, object]:
  """(encoded image, int32 label) of a TFDS example: what every split holds per example.
  Sources whose label is derived from other features (VTAB's tasks) pass their own."""
  import tensorflow as tf  # tf.data readers only
  return example["image"], tf.cast(example["label"], tf.int32)


@dataclasses.dataclass
class StreamingSplit:
  """A TFDS split too large for memory, read as file shards of encoded images;
  `features` maps each TFDS example to its (encoded image, int32 label or multi-hot)."""
  kind: ClassVar[str] = "encoded"
  builder: object
  split: str
  num_examples: int
  features: Callable[[dict], Tuple[object, object]] = image_and_label
  multi_label: bool = False  # `features` gives multi-hot labels [K]

  def __len__(self):
    return self.num_examples

