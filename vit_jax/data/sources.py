"""Where examples come from: the embedded digits, an image directory, or TFDS.

Each source is validated when opened (fast, before any training): a missing directory,
an empty class folder, a corrupt image or an absent TFDS dataset is one error line
naming it and the fix. Sources that fit in memory become an IndexedSplit, readable by
index in any order; TFDS datasets over IN_MEMORY_LIMIT_BYTES are a StreamingSplit.
"""

import dataclasses
import difflib
import errno
import os
import re
import urllib.parse
from typing import Callable, ClassVar, List, Optional, Tuple

import numpy as np
import tensorflow as tf

from vit_jax import errors

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png")
IN_MEMORY_LIMIT_BYTES = 2 << 30  # TFDS datasets up to this size are held in memory
DIGITS_TEST_SIZE = 300  # the digits' test split: the first 300 of a permutation drawn
DIGITS_SPLIT_SEED = 0   # with this seed; the other 1,497 are the train split
DIGITS_CLASSES = tuple(str(d) for d in range(10))
_TFDS_READ_BATCH = 4096
_JPEG_MAGIC, _PNG_MAGIC = b"\xff\xd8\xff", b"\x89PNG\r\n\x1a\n"
_TAIL_BYTES = 64 << 10  # where an image file's end marker must be (trailers allowed)


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

  def __len__(self):
    return len(self.labels)

  def image_error(self, index: int, error: Exception) -> Exception:
    """The one-line error for example `index` failing with `error` (TF's message names
    no file): which image, why, and the fix."""
    reason = " ".join(re.sub(r"\{\{.*?\}\}|\[\[.*?\]\]|\[Op:.*", "", str(error),
                             flags=re.S).split()).rstrip(".")
    if self.kind != "files":
      return CorruptImageError(f"corrupt image: example {index} of {self.source or 'the data'}"
                               f": {reason}; rebuild the dataset")
    path = os.fsdecode(self.data[index])
    if isinstance(error, tf.errors.NotFoundError):
      return FileNotFoundError(f"image {path} disappeared after the dataset was opened; "
                               "restore it, or rerun to scan the folder again")
    return CorruptImageError(f"corrupt image {path}: {reason}; replace or remove it")


def image_and_label(example: dict) -> Tuple[tf.Tensor, tf.Tensor]:
  """(encoded image, int32 label) of a TFDS example: what every split holds per example.
  Sources whose label is derived from other features (VTAB's tasks) pass their own."""
  return example["image"], tf.cast(example["label"], tf.int32)


def image_and_labels(feature: str, num_classes: int):
  """features() of an example with a list of correct classes (e.g. ImageNet ReaL's
  'real_label'): the label is multi-hot int32 [num_classes], all 0 for an empty list."""
  def features(example: dict) -> Tuple[tf.Tensor, tf.Tensor]:
    listed = tf.one_hot(tf.cast(example[feature], tf.int32), num_classes) > 0  # [n, K]
    any_listed = tf.reduce_any(listed, axis=0)  # not reduce_max: it is -2^31 for n = 0
    return example["image"], tf.cast(any_listed, tf.int32)
  return features


@dataclasses.dataclass
class StreamingSplit:
  """A TFDS split too large for memory, read as file shards of encoded images;
  `features` maps each TFDS example to its (encoded image, int32 label)."""
  kind: ClassVar[str] = "encoded"
  builder: object
  split: str
  num_examples: int
  features: Callable[[dict], Tuple[tf.Tensor, tf.Tensor]] = image_and_label

  def __len__(self):
    return self.num_examples


# --- The embedded dataset ------------------------------------------------------------------


def digits_source():
  """scikit-learn's 1,797 8x8 digits as uint8 RGB, split 1,497 train / 300 test.

  The split is fixed: permutation(1797) of default_rng(DIGITS_SPLIT_SEED), whose first
  DIGITS_TEST_SIZE examples are the test split.
  """
  from sklearn.datasets import load_digits  # only this source needs scikit-learn
  bunch = load_digits()
  gray = np.round(bunch.images * (255 / 16)).astype(np.uint8)
  pixels = np.repeat(gray[..., None], 3, axis=-1)
  labels = bunch.target.astype(np.int32)
  order = np.random.default_rng(DIGITS_SPLIT_SEED).permutation(len(labels))
  test, train = order[:DIGITS_TEST_SIZE], order[DIGITS_TEST_SIZE:]
  return (IndexedSplit(pixels[train], labels[train], "pixels"),
          IndexedSplit(pixels[test], labels[test], "pixels"), list(DIGITS_CLASSES))


# --- Image directories ---------------------------------------------------------------------


def check_image_file(path: str) -> None:
  """Cheap up-front check (magic bytes, end marker) so that a corrupt file fails now,
  naming itself, rather than hours into training."""
  try:
    size = os.path.getsize(path)
    with open(path, "rb") as f:
      head = f.read(8)
      f.seek(max(0, size - _TAIL_BYTES))
      tail = f.read()
  except OSError as e:  # no permission, or gone since the scan
    raise _unreadable(path, e) from None
  if head.startswith(_JPEG_MAGIC):
    complete = b"\xff\xd9" in tail
  elif head.startswith(_PNG_MAGIC):
    complete = b"IEND" in tail
  else:
    raise CorruptImageError(f"corrupt image {path}: not a JPEG or PNG file ({size} bytes); "
                            "replace or remove it")
  if not complete:
    raise CorruptImageError(f"corrupt image {path}: truncated (no end marker); replace or "
                            "remove it")


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


def _image_files(folder: str) -> List[str]:
  return sorted(entry.path for entry in _scan(folder, want_dirs=False)
                if entry.name.lower().endswith(IMAGE_EXTENSIONS))


def _folder_split(split_dir: str, classes: List[str]) -> IndexedSplit:
  """Files of split_dir/<class>/ for each class folder present, labelled by `classes`."""
  unknown = sorted(set(class_folders(split_dir)) - set(classes))
  if unknown:
    raise errors.InvalidInput(
        f"{split_dir} has classes that train/ lacks: {', '.join(unknown)}; "
        "add them to train/ or remove them")
  paths, labels = [], []
  for label, name in enumerate(classes):
    folder = os.path.join(split_dir, name)
    if not os.path.isdir(folder):
      continue
    files = _image_files(folder)
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
  return IndexedSplit(np.array([os.fsencode(path) for path in paths], object),
                      np.array(labels, np.int32), "files")


def directory_source(root: str):
  """ROOT/train/<class>/* and ROOT/test/<class>/* (or ROOT/validation/<class>/*).

  Classes are the sorted subfolders of train/; images are .jpg/.jpeg/.png in any case.
  """
  root = os.path.expanduser(root)
  if not os.path.isdir(root):
    raise FileNotFoundError(f"dataset directory {root} does not exist; set config.dataset to "
                            "a directory with train/<class>/ and test/<class>/, a TFDS name "
                            "or 'digits'")
  train_dir = os.path.join(root, "train")
  if not os.path.isdir(train_dir):
    raise errors.InvalidInput(
        f"{root} has no train/ folder; put training images in "
        f"{train_dir}/<class>/")
  eval_dir = next((os.path.join(root, name) for name in ("test", "validation")
                   if os.path.isdir(os.path.join(root, name))), None)
  if eval_dir is None:
    raise errors.InvalidInput(
        f"{root} has neither test/ nor validation/; hold out images in "
        f"{root}/test/<class>/")
  classes = class_folders(train_dir)
  return _folder_split(train_dir, classes), _folder_split(eval_dir, classes), classes


# --- TFDS -------------------------------------------------------------------------------------


def _tfds_builder(name: str, data_dir: Optional[str]):
  import tensorflow_datasets as tfds
  try:
    return tfds.builder(name, data_dir=data_dir)
  except ValueError:  # not registered, or not even a valid builder name
    close = difflib.get_close_matches(name, ["digits"] + tfds.list_builders(), n=4)
    hint = f"did you mean {', '.join(close)}?" if close else "see tfds.list_builders()"
    raise errors.InvalidInput(
        f"unknown dataset {name!r}: not 'digits', not an existing directory and "
        f"not a TFDS name; {hint}") from None


def _default_manual_dir(builder) -> str:
  return os.path.join(builder.data_dir_root, "downloads", "manual")  # as tfds defaults it


def _instructions(builder) -> str:
  """A dataset's manual download instructions on one line ('' if TFDS downloads it)."""
  return " ".join((builder.MANUAL_DOWNLOAD_INSTRUCTIONS or "").split())


def build_name(builder) -> str:
  """`name[/config]:version` as `tfds build` takes it: builds the version this run reads."""
  name, version = builder.info.full_name.rsplit("/", 1)
  return f"{name}:{version}"


def read_tfds(builder, split, **kwargs) -> tf.data.Dataset:
  """Examples with undecoded images (decode after the shuffle / the crop window), or a
  one-line error if the data is absent (tfds's download=False semantics)."""
  import tensorflow_datasets as tfds
  try:
    return builder.as_dataset(split=split, decoders={"image": tfds.decode.SkipDecoding()},
                              **kwargs)
  except AssertionError:  # tfds: "could not find data in DIR"
    where = f"TFDS dataset {builder.name} is not prepared in {builder.data_dir}"
    if _instructions(builder):  # tfds_download=True alone cannot fetch it
      raise FileNotFoundError(
          f"{where}, and TFDS cannot download it by itself: {_instructions(builder)} Put "
          f"those files in config.tfds_manual_dir (default {_default_manual_dir(builder)}), "
          "then set config.tfds_download=True to prepare them") from None
    raise FileNotFoundError(
        f"{where}; run `tfds build {build_name(builder)} --data_dir={builder.data_dir_root}` "
        "on a machine with network, or set config.tfds_data_dir to a prepared copy (or "
        "config.tfds_download=True)") from None


_PROBE_TIMEOUT_S = 5
_TFDS_MIRROR = "https://storage.googleapis.com/"  # tfds fetches mirrored datasets from here


def _check_network(builder) -> None:
  """Fails in seconds when neither the dataset's hosts nor tfds's mirror answer (offline):
  tfds itself retries each URL for ~3.5 minutes, then raises a long traceback. Asks
  through the proxies the environment sets, as tfds's requests do; any HTTP answer
  counts. Builders that list no URLs are not probed."""
  import requests
  urls = builder.url_infos or {}
  parts = [urllib.parse.urlsplit(url) for url in urls]
  origins = sorted({f"{part.scheme}://{part.netloc}/" for part in parts
                    if part.scheme in ("http", "https")})
  if not origins:
    return
  failures = []
  for origin in [*origins, _TFDS_MIRROR]:
    try:
      requests.head(origin, timeout=_PROBE_TIMEOUT_S, allow_redirects=False)
      return
    except requests.Timeout:
      failures.append(f"{origin} (no answer in {_PROBE_TIMEOUT_S} s)")
    except requests.RequestException as e:
      failures.append(f"{origin} ({type(e).__name__})")
  raise FileNotFoundError(
      f"cannot download TFDS dataset {builder.name}: no network connection to "
      f"{', '.join(failures)}; connect to the network, or run "
      f"`tfds build {build_name(builder)} --data_dir=DIR` on a machine with network and set "
      "config.tfds_data_dir to a copy of DIR")


def _download_and_prepare(builder, manual_dir: Optional[str]) -> None:
  """builder.download_and_prepare, with a one-line error for what users can fix: files
  TFDS cannot download by itself, no network, a failed download."""
  import requests
  import tensorflow_datasets as tfds
  if _instructions(builder):
    manual = os.path.expanduser(manual_dir or _default_manual_dir(builder))
    if not tf.io.gfile.isdir(manual) or not tf.io.gfile.listdir(manual):  # gs:// too
      raise FileNotFoundError(
          f"TFDS dataset {builder.name} needs files downloaded by hand: "
          f"{_instructions(builder)} Put them in {manual} (or set config.tfds_manual_dir to "
          "where they are) and rerun")
  _check_network(builder)
  try:
    builder.download_and_prepare(
        download_config=tfds.download.DownloadConfig(manual_dir=manual_dir))
  except (requests.RequestException, tfds.download.DownloadError) as e:
    raise FileNotFoundError(f"downloading TFDS dataset {builder.name} failed: "
                            f"{' '.join(str(e).split())}; check the network and rerun, or "
                            f"run `tfds build {build_name(builder)}` where it works") from e


def _tfds_in_memory(builder, split: str, features=image_and_label) -> IndexedSplit:
  """A whole split as encoded bytes: decoding stays per example, after the gather."""
  data = read_tfds(builder, split, shuffle_files=False)
  data = data.map(features, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
  images, labels = [], []
  for image_batch, label_batch in data.batch(_TFDS_READ_BATCH).as_numpy_iterator():
    images.append(image_batch)
    labels.append(label_batch)
  return IndexedSplit(np.concatenate(images), np.concatenate(labels), "encoded",
                      f"TFDS {builder.name} split {split!r} in {builder.data_dir}")


def prepared_builder(name: str, *, data_dir=None, manual_dir=None, download=False):
  """The TFDS builder of `name`, prepared first with download=True (touches the network
  only then: it may take minutes; offline it fails in seconds)."""
  builder = _tfds_builder(name, data_dir)
  if download:
    prepare(builder, manual_dir)
  return builder


def prepare(builder, manual_dir=None) -> None:
  if not builder.is_prepared():
    _download_and_prepare(builder, manual_dir)


def versioned_builder(name: str, version: str, data_dir=None):
  """The TFDS builder of `name` at `version` (a TFDS pattern such as '3.*.*'), or None
  when the installed TFDS can neither build that version nor read it prepared in
  data_dir (or does not know `name`)."""
  import tensorflow_datasets as tfds
  try:
    return tfds.builder(f"{name}:{version}", data_dir=data_dir)
  except (AssertionError, ValueError):  # "cannot be loaded at version 3.*.*, only: 4.0.0"
    return None


def tfds_split(builder, split: str, features=image_and_label):
  """One split (any TFDS split string) in memory, or streamed when its share of the
  dataset's size is over IN_MEMORY_LIMIT_BYTES; absent data fails at once."""
  info = builder.info
  if (info.dataset_size or 0) > IN_MEMORY_LIMIT_BYTES:
    num_examples = info.splits[split].num_examples
    total = sum(s.num_examples for s in info.splits.values())
    if info.dataset_size * num_examples / max(total, 1) > IN_MEMORY_LIMIT_BYTES:
      read_tfds(builder, split)  # fails fast if absent
      return StreamingSplit(builder, split, num_examples, features)
  return _tfds_in_memory(builder, split, features)


def _check_features(builder, label_feature: str) -> None:
  missing = {"image", label_feature} - set(builder.info.features)
  if missing:
    raise errors.InvalidInput(
        f"TFDS dataset {builder.name} lacks the feature(s) "
        f"{', '.join(sorted(missing))}; only image classification datasets with "
        f"'image' and '{label_feature}' work")


def _class_names(builder, label_feature: str) -> List[str]:
  feature = builder.info.features[label_feature]
  return list(getattr(feature, "feature", feature).names)  # a Sequence holds its ClassLabel


def tfds_source(name: str, train_split: str, eval_split: str, *, data_dir=None,
                manual_dir=None, download=False):
  """A TFDS dataset; touches the network only with download=True (then it may take
  minutes; offline it fails in seconds), otherwise a missing dataset fails at once."""
  builder = prepared_builder(name, data_dir=data_dir, manual_dir=manual_dir,
                             download=download)
  _check_features(builder, "label")
  if (builder.info.dataset_size or 0) > IN_MEMORY_LIMIT_BYTES:
    read_tfds(builder, train_split)  # fails fast if absent
    splits = [StreamingSplit(builder, split, builder.info.splits[split].num_examples)
              for split in (train_split, eval_split)]
  else:
    splits = [_tfds_in_memory(builder, split) for split in (train_split, eval_split)]
  return splits[0], splits[1], _class_names(builder, "label")


def tfds_eval_source(name: str, split: str, *, label_feature: str = "label", data_dir=None,
                     manual_dir=None, download=False):
  """(split, class names) of a TFDS dataset used for evaluation only. A label_feature
  other than 'label' is a list of correct classes (e.g. 'real_label'), read as multi-hot."""
  builder = prepared_builder(name, data_dir=data_dir, manual_dir=manual_dir,
                             download=download)
  _check_features(builder, label_feature)
  names = _class_names(builder, label_feature)
  features = (image_and_label if label_feature == "label"
              else image_and_labels(label_feature, len(names)))
  return tfds_split(builder, split, features), names


def tfds_class_count(name: str, data_dir: Optional[str]) -> int:
  """The 'label' feature's class count from TFDS's metadata (no example read)."""
  builder = _tfds_builder(name, data_dir)
  _check_features(builder, "label")
  return builder.info.features["label"].num_classes
