"""What a source hands the pipeline: an IndexedSplit (examples in memory or as file
paths, read by index in any order, with their captions where they have some) or a
StreamingSplit (a TFDS split too large for memory), and the one-line error a bad image
becomes. Kept apart from the sources so that the pipeline depends on these types, not on
any reader."""

import dataclasses
import hashlib
import os
import re
from typing import Callable, ClassVar, Dict, List, Optional, Sequence, Tuple

import numpy as np

from vit_jax.base import errors


# What to do about a corrupt image file: removing it changes the data, which a resume
# refuses unless told (vit_jax.training.runs.dataset_record), so the advice says how.
FIX = ("replace it with a readable copy, or remove it (a run that already started then "
       "resumes with --config.allow_data_change=True)")


class CorruptImageError(errors.InvalidInput):
  """An image that cannot be decoded: the message names it and the fix, on one line."""


@dataclasses.dataclass
class Captions:
  """Each example's captions (one or more), in memory: example i's are
  texts[first[i]:first[i + 1]]. Every captions object the pipeline reads answers `of` and
  len() (readers that keep them elsewhere, such as shards, read them by index)."""
  texts: np.ndarray  # object [C]: str
  first: np.ndarray  # int64 [N + 1]

  @classmethod
  def grouped(cls, captions: Sequence[Sequence[str]]) -> "Captions":
    """From one list of captions per example."""
    first = np.zeros(len(captions) + 1, np.int64)
    first[1:] = np.cumsum([len(texts) for texts in captions])
    texts = np.empty(int(first[-1]), object)
    texts[:] = [text for example in captions for text in example]
    return cls(texts, first)

  def __len__(self):
    return len(self.first) - 1

  def of(self, index: int) -> List[str]:
    return list(self.texts[self.first[index]:self.first[index + 1]])

  def digest(self) -> str:
    """sha256 of every caption and which example it belongs to (the split's fingerprint)."""
    digest = hashlib.sha256(np.ascontiguousarray(self.first).tobytes())
    for text in self.texts:
      digest.update(text.encode() + b"\0")
    return digest.hexdigest()


@dataclasses.dataclass
class ClassCaptions:
  """The captions of labelled examples, made from their class (vit_jax.data.captions):
  example i's are per_class[labels[i]], kept once per class."""
  labels: np.ndarray  # int32 [N]
  per_class: Tuple[Tuple[str, ...], ...]

  def __len__(self):
    return len(self.labels)

  def of(self, index: int) -> List[str]:
    return list(self.per_class[self.labels[index]])

  def digest(self) -> str:
    """sha256 of each class's captions (the labels are the split's own)."""
    return hashlib.sha256("\0\0".join("\0".join(texts) for texts in self.per_class)
                          .encode()).hexdigest()


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
  captions: Optional[Captions] = None  # or any object answering Captions.of and len()

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

