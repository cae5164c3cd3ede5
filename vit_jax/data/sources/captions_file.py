"""A captions file as a source: IMAGE<TAB>CAPTION lines, images relative to the file, an
image on several lines having several captions (training draws one per step), the format
`python -m vit_jax.zeroshot --captions` reads (image_files.read_captions). config.dataset
is 'captions:PATH' or a path ending in .tsv or .txt; config.eval_split names the captions
file of the held-out images (as a path, or relative to the training file's folder). No
classes: class names [], labels 0. Every image is checked when the file is opened, so a
missing or corrupt one is one line naming the captions file's line before any training."""

import os

import numpy as np

from vit_jax.base import errors, storage
from vit_jax.data import image_files
from vit_jax.data.sources import image_folder, source_contract
from vit_jax.data.splits import Captions, IndexedSplit

PREFIX = "captions:"
SUFFIXES = (".tsv", ".txt")


def _line_of(path: str, image: str) -> int:
  """The number of the first line of a captions file that names `image` (read_captions
  joins it to the file's folder)."""
  lines = enumerate(storage.read_text(path).splitlines(), 1)
  return next(number for number, line in lines
              if os.path.join(os.path.dirname(path), line.split("\t", 1)[0]) == image)


def _check_image(path: str, image: str) -> None:
  """image_folder's up-front check, naming the line of the captions file."""
  if not os.path.isfile(image):
    raise errors.InvalidInput(f"{path}:{_line_of(path, image)}: image {image} does not exist; "
                              "fix the line or remove it")
  try:
    image_folder.check_image_file(image)
  except errors.InvalidInput as e:
    raise type(e)(f"{path}:{_line_of(path, image)}: {e}") from None


def captions_split(path: str) -> IndexedSplit:
  """The images of a captions file with their captions, every image checked."""
  if not os.path.isfile(path):
    raise FileNotFoundError(f"captions file {path} does not exist; give a file of "
                            "IMAGE<TAB>CAPTION lines")
  images, captions, owner = image_files.read_captions(path)
  for image in images:
    _check_image(path, image)
  grouped = [[] for _ in images]
  for caption, image in zip(captions, owner):
    grouped[image].append(caption)
  return IndexedSplit(np.array([os.fsencode(image) for image in images], object),
                      np.zeros(len(images), np.int32), "files", source=path,
                      captions=Captions.grouped(grouped))


def is_captions_file(name: str) -> bool:
  return name.startswith(PREFIX) or name.lower().endswith(SUFFIXES)


def file_of(name: str) -> str:
  return os.path.expanduser(name[len(PREFIX):] if name.startswith(PREFIX) else name)


def eval_file(train_path: str, eval_split) -> str:
  """config.eval_split's captions file: as given where it exists, else beside the training
  file."""
  if not eval_split:
    raise errors.InvalidInput(f"{train_path} is a captions file: set config.eval_split to the "
                              "captions file of held-out images (IMAGE<TAB>CAPTION lines)")
  path = file_of(eval_split)
  if os.path.isfile(path) or os.path.isabs(path):
    return path
  return os.path.join(os.path.dirname(train_path), path)


class CaptionsFile:
  """config.dataset='captions:PATH' or PATH.tsv / PATH.txt."""
  loaders = ("tf", "grain")
  takes_label_feature = False

  def handles(self, config) -> bool:
    return is_captions_file(config.dataset)

  def open(self, config, loader):
    path = file_of(config.dataset)
    train = captions_split(path)
    return train, captions_split(eval_file(path, config.eval_split)), []

  def class_count(self, config) -> int:
    return 0

  def open_eval(self, name, split, config, label_feature, loader):
    if not is_captions_file(name):
      return None
    source_contract.labels_only(name, label_feature)
    return captions_split(file_of(name)), []


SOURCE = CaptionsFile()
