"""A multi-label image folder: ROOT/train and ROOT/test (or validation/) each hold their
images, in any layout below them, and a labels.csv with a header row `path,labels` and
one row per image: its path relative to that split folder and its labels separated by
';' (an empty field: no label, kept as an all-negative example).

Classes are the sorted label names of train/labels.csv; labels become multi-hot int32
[N, K]. Like the class-folder layout, everything is checked when opened, each problem
one line naming a few cases: a malformed file, unknown label names, listed paths that are
not in the folder, images in the folder that the file does not list, corrupt images.
"""

import csv
import io
import os
from typing import Dict, List, Sequence, Tuple

import numpy as np

from vit_jax.base import errors, storage
from vit_jax.data.sources import image_folder, source_contract
from vit_jax.data.splits import IndexedSplit

LABELS_FILE = "labels.csv"
HEADER = ["path", "labels"]
SEPARATOR = ";"
_SHOWN = 3


def is_multilabel_folder(root: str) -> bool:
  return os.path.isfile(os.path.join(os.path.expanduser(root), "train", LABELS_FILE))


def _few(items: Sequence[str]) -> str:
  items = sorted(items)
  more = f" (+{len(items) - _SHOWN} more)" if len(items) > _SHOWN else ""
  return ", ".join(repr(item) for item in items[:_SHOWN]) + more


def read_labels_file(split_dir: str) -> Dict[str, List[str]]:
  """{normalised relative path: label names} of split_dir/labels.csv."""
  path = os.path.join(split_dir, LABELS_FILE)
  if not os.path.isfile(path):
    raise errors.InvalidInput(f"{split_dir} has no {LABELS_FILE}; add one with the header "
                              f"row 'path,labels' and a row per image")
  try:
    rows = list(csv.reader(io.StringIO(storage.read_text(path, "utf-8-sig"), newline="")))
  except (OSError, UnicodeDecodeError, csv.Error) as e:
    raise errors.InvalidInput(f"cannot read {path}: {e}; write it as UTF-8 CSV") from None
  if not rows or [cell.strip() for cell in rows[0]] != HEADER:
    first = ",".join(rows[0]) if rows else "an empty file"
    raise errors.InvalidInput(f"{path} must start with the header row 'path,labels', not "
                              f"{first!r}")
  labels, bad, repeated = {}, [], []
  for number, row in enumerate(rows[1:], start=2):
    if not row:
      continue
    if len(row) != 2 or not row[0].strip():
      bad.append(f"line {number}")
      continue
    key = os.path.normpath(row[0].strip())
    if key in labels:
      repeated.append(row[0].strip())
    labels[key] = sorted({name.strip() for name in row[1].split(SEPARATOR) if name.strip()})
  if bad:
    raise errors.InvalidInput(f"{path}: {len(bad)} row(s) are not 'path,labels' (labels "
                              f"separated by '{SEPARATOR}'): {', '.join(bad[:_SHOWN])}; fix "
                              "them (quote a path holding a comma)")
  if repeated:
    raise errors.InvalidInput(f"{path} lists {len(repeated)} path(s) twice: "
                              f"{_few(repeated)}; keep one row per image")
  return labels


def _images_below(split_dir: str) -> List[str]:
  """Relative, normalised paths of every image file below split_dir (any depth)."""
  found = []

  def refuse(error: OSError):
    raise errors.InvalidInput(f"cannot read {error.filename}: {error.strerror}; fix or remove "
                              "that entry of the image folder")

  for folder, dirs, files in os.walk(split_dir, onerror=refuse, followlinks=True):
    dirs[:] = [d for d in dirs if not d.startswith(".")]
    found += [os.path.normpath(os.path.relpath(os.path.join(folder, name), split_dir))
              for name in files if name.lower().endswith(image_folder.IMAGE_EXTENSIONS)]
  return sorted(found)


def _split(split_dir: str, labels: Dict[str, List[str]], classes: List[str]) -> IndexedSplit:
  where = os.path.join(split_dir, LABELS_FILE)
  unknown = set(_names(labels)) - set(classes)
  if unknown:
    raise errors.InvalidInput(f"{where} uses {len(unknown)} label(s) that train/{LABELS_FILE} "
                              f"never does: {_few(unknown)}; label some training images with "
                              "them or remove them")
  on_disk = _images_below(split_dir)
  missing = set(labels) - set(on_disk)
  if missing:
    raise errors.InvalidInput(f"{where} lists {len(missing)} path(s) missing from "
                              f"{split_dir}: {_few(missing)}; fix the paths (relative to "
                              "that folder) or remove their rows")
  unlisted = set(on_disk) - set(labels)
  if unlisted:
    raise errors.InvalidInput(f"{len(unlisted)} image(s) in {split_dir} are missing from "
                              f"{where}: {_few(unlisted)}; add a row for each (an empty "
                              "labels field for none) or remove them")
  if not on_disk:
    raise errors.InvalidInput(f"{split_dir} has no .jpg/.jpeg/.png images; add some with "
                              f"their rows in {where}")
  index = {name: i for i, name in enumerate(classes)}
  hot = np.zeros((len(on_disk), len(classes)), np.int32)
  paths = []
  for row, relative in enumerate(on_disk):
    path = os.path.join(split_dir, relative)
    image_folder.check_image_file(path)
    paths.append(os.fsencode(path))
    hot[row, [index[name] for name in labels[relative]]] = 1
  return IndexedSplit(np.array(paths, object), hot, "files")


def _names(labels: Dict[str, List[str]]) -> List[str]:
  return sorted({name for names in labels.values() for name in names})


def class_names(root: str) -> List[str]:
  """The sorted label names of train/labels.csv (no image read)."""
  return _names(read_labels_file(os.path.join(os.path.expanduser(root), "train")))


def multilabel_source(root: str) -> Tuple[IndexedSplit, IndexedSplit, List[str]]:
  """(train, eval, class names) of a multi-label folder (see the module docstring)."""
  train_dir, eval_dir = image_folder.split_dirs(root, f"(any layout) with a {LABELS_FILE}")
  train_labels = read_labels_file(train_dir)
  classes = _names(train_labels)
  if not classes:
    raise errors.InvalidInput(f"{os.path.join(train_dir, LABELS_FILE)} gives no image a "
                              "label; label the training images")
  return (_split(train_dir, train_labels, classes),
          _split(eval_dir, read_labels_file(eval_dir), classes), classes)


class MultilabelFolder:
  """A folder whose train/ holds a labels.csv."""
  loaders = ("tf", "grain")
  takes_label_feature = False

  def handles(self, config) -> bool:
    return source_contract.is_path(config.dataset) and is_multilabel_folder(config.dataset)

  def open(self, config, loader):
    return multilabel_source(config.dataset)

  def class_count(self, config) -> int:
    return len(class_names(config.dataset))

  def open_eval(self, name, split, config, label_feature, loader):
    if not (source_contract.is_path(name) and is_multilabel_folder(name)):
      return None
    source_contract.labels_only(name, label_feature)
    _, evaluation, names = multilabel_source(name)
    return evaluation, names


SOURCE = MultilabelFolder()
