"""An image folder as a source: ROOT/train/<class>/*, ROOT/test/<class>/* (or
validation/). The whole tree is scanned and every file checked when opened, so a missing
folder, an empty class, an unreadable entry or a corrupt image is one line naming it
before any training, not hours in."""

import errno
import os
from typing import List, Optional, Tuple

import numpy as np

from vit_jax.base import errors, storage
from vit_jax.base.console import log
from vit_jax.data import splits
from vit_jax.data.sources import source_contract
from vit_jax.data.splits import CorruptImageError, IndexedSplit

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png")
# Images that PIL (and so `predict`) reads but training does not: skipped, with a warning.
OTHER_IMAGE_EXTENSIONS = (".webp", ".bmp", ".gif", ".tif", ".tiff", ".heic", ".avif")
# An image over this many pixels makes every step that decodes it slow (a 10000 x 10000
# PNG made a run 12x slower), so it is named.
LARGE_PIXELS = 40_000_000
_JPEG_MAGIC, _PNG_MAGIC = b"\xff\xd8\xff", b"\x89PNG\r\n\x1a\n"
_TAIL_BYTES = 64 << 10  # where an image file's end marker must be (trailers allowed)
# JPEG start-of-frame markers (SOF0-SOF15 but DHT, JPG and DAC): the header with the size.
_JPEG_FRAMES = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
_JPEG_SCAN = 0xDA


def _jpeg_dimensions(f) -> Optional[Tuple[int, int]]:
  """(width, height) from a JPEG's frame header, found by walking the segments before it
  (EXIF or a comment can put it tens of KB in; a decompression bomb is a small file whose
  header claims a huge size): nothing is decoded. None where there is no frame header."""
  f.seek(2)
  while True:
    segment = f.read(4)  # 0xFF, the marker, the segment's length (big-endian, with itself)
    length = int.from_bytes(segment[2:], "big")
    if len(segment) < 4 or segment[0] != 0xFF or segment[1] == _JPEG_SCAN or length < 2:
      return None  # no frame header before the image data, or a damaged file
    if segment[1] in _JPEG_FRAMES:
      frame = f.read(5)  # precision, height, width
      if len(frame) < 5:
        return None
      return int.from_bytes(frame[3:5], "big"), int.from_bytes(frame[1:3], "big")
    f.seek(length - 2, os.SEEK_CUR)


def check_image_file(path: str) -> None:
  """Cheap up-front check (magic bytes, end marker) so that a corrupt file fails now,
  naming itself, rather than hours into training."""
  try:
    size = os.path.getsize(path)
    with storage.open_read(path) as f:
      head = f.read(24)
      f.seek(max(0, size - _TAIL_BYTES))
      tail = f.read()
      dimensions = _jpeg_dimensions(f) if head.startswith(_JPEG_MAGIC) else None
  except OSError as e:  # no permission, or gone since the scan
    raise _unreadable(path, e) from None
  if head.startswith(_JPEG_MAGIC):
    complete = b"\xff\xd9" in tail
  elif head.startswith(_PNG_MAGIC):
    complete = b"IEND" in tail
  else:
    raise CorruptImageError(f"corrupt image {path}: not a JPEG or PNG file ({size} bytes); "
                            f"{splits.FIX}")
  if not complete:
    raise CorruptImageError(f"corrupt image {path}: truncated (no end marker); {splits.FIX}")
  if head.startswith(_PNG_MAGIC) and len(head) == 24:  # IHDR: width, height (big-endian)
    dimensions = int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")
  if dimensions and dimensions[0] * dimensions[1] > LARGE_PIXELS:
    log.warning("image %s is %dx%d px: decoding it slows every step that reads it; "
                "downscale it (training resizes it to the crop anyway)", path, *dimensions)


def _unreadable(path: str, error: OSError) -> errors.InvalidInput:
  loop = " (a symlink loop)" if error.errno == errno.ELOOP else ""
  return errors.InvalidInput(f"cannot read {path}: {error.strerror}{loop}; fix or remove "
                             "that entry of the image folder")


def _scan(folder: str, want_dirs: bool) -> List[os.DirEntry]:
  """The folders (want_dirs) or files of `folder`; an entry that cannot be read (a
  symlink loop, no permission) is one line naming it."""
  try:
    entries = list(os.scandir(folder))
  except OSError as e:
    raise _unreadable(folder, e) from None
  found = []
  for entry in entries:
    try:
      if entry.is_dir() if want_dirs else entry.is_file():
        found.append(entry)
      elif entry.is_symlink():
        os.stat(entry.path)  # a dangling link: FileNotFoundError names it
    except OSError as e:
      raise _unreadable(entry.path, e) from None
  return found


def class_folders(split_dir: str) -> List[str]:
  return sorted(entry.name for entry in _scan(split_dir, want_dirs=True)
                if not entry.name.startswith("."))


def _image_files(folder: str) -> Tuple[List[str], List[str]]:
  """(the images training reads, other images it skips) of one class folder, sorted."""
  files = sorted(entry.path for entry in _scan(folder, want_dirs=False))
  return ([path for path in files if path.lower().endswith(IMAGE_EXTENSIONS)],
          [path for path in files if path.lower().endswith(OTHER_IMAGE_EXTENSIONS)])


def _folder_split(split_dir: str, classes: List[str]) -> IndexedSplit:
  """Files of split_dir/<class>/ for each class folder present, labelled by `classes`."""
  unknown = sorted(set(class_folders(split_dir)) - set(classes))
  if unknown:
    raise errors.InvalidInput(
        f"{split_dir} has classes that train/ lacks: {', '.join(unknown)}; "
        "add them to train/ or remove them")
  paths, labels, skipped = [], [], []
  for label, name in enumerate(classes):
    folder = os.path.join(split_dir, name)
    if not os.path.isdir(folder):
      continue
    files, others = _image_files(folder)
    skipped += others
    if not files:
      raise errors.InvalidInput(
          f"class folder {folder} has no .jpg/.jpeg/.png images; add some or "
          "remove the folder")
    for path in files:
      check_image_file(path)
    paths += files
    labels += [label] * len(files)
  if not paths:
    raise errors.InvalidInput(
        f"{split_dir} has no class folders; put its images in "
        f"{split_dir}/<class>/")
  if skipped:
    log.warning("%s: skipping %d image(s) that training does not read (%s%s): convert them "
                "to JPEG or PNG to use them", split_dir, len(skipped), ", ".join(skipped[:2]),
                f", +{len(skipped) - 2} more" if len(skipped) > 2 else "")
  return IndexedSplit(np.array([os.fsencode(path) for path in paths], object),
                      np.array(labels, np.int32), "files")


def split_dirs(root: str, layout: str = "<class>/"):
  """(ROOT/train, ROOT/test or ROOT/validation) of an image folder, or one line saying
  which is missing; `layout` is what a split folder should hold, for the hint."""
  root = os.path.expanduser(root)
  if not os.path.isdir(root):
    raise FileNotFoundError(f"dataset directory {root} does not exist; set config.dataset to "
                            "a directory with train/<class>/ and test/<class>/, a TFDS name "
                            "or 'digits'")
  train_dir = os.path.join(root, "train")
  if not os.path.isdir(train_dir):
    raise errors.InvalidInput(
        f"{root} has no train/ folder; put training images in "
        f"{train_dir}/{layout}")
  eval_dir = next((os.path.join(root, name) for name in ("test", "validation")
                   if os.path.isdir(os.path.join(root, name))), None)
  if eval_dir is None:
    raise errors.InvalidInput(
        f"{root} has neither test/ nor validation/; hold out images in "
        f"{root}/test/{layout}")
  return train_dir, eval_dir


def directory_source(root: str):
  """ROOT/train/<class>/* and ROOT/test/<class>/* (or ROOT/validation/<class>/*).

  Classes are the sorted subfolders of train/; images are .jpg/.jpeg/.png in any case.
  """
  train_dir, eval_dir = split_dirs(root)
  classes = class_folders(train_dir)
  return _folder_split(train_dir, classes), _folder_split(eval_dir, classes), classes


class ImageFolder:
  """Any other folder, or name written as a path: ROOT/train/<class>/, ROOT/test/<class>/."""
  loaders = ("tf", "grain")
  takes_label_feature = False

  def handles(self, config) -> bool:
    return source_contract.is_path(config.dataset)

  def open(self, config, loader):
    return directory_source(config.dataset)

  def class_count(self, config) -> int:
    return len(class_folders(os.path.join(os.path.expanduser(config.dataset), "train")))

  def open_eval(self, name, split, config, label_feature, loader):
    if not source_contract.is_path(name):
      return None
    source_contract.labels_only(name, label_feature)
    _, evaluation, names = directory_source(name)
    return evaluation, names


SOURCE = ImageFolder()
