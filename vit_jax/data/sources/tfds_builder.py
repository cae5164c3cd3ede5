"""TFDS datasets as sources: opening a builder, preparing it (downloads only on request,
failing in seconds offline), and reading its splits, in memory up to
IN_MEMORY_LIMIT_BYTES, streamed beyond. An absent or unknown dataset is one line naming
it and the fix."""

import difflib
import os
import urllib.parse
from typing import List, Optional, Tuple

import numpy as np
import tensorflow as tf

from vit_jax.base import errors, storage
from vit_jax.data import fingerprint
from vit_jax.data.splits import image_and_label, IndexedSplit, StreamingSplit

# Datasets the configs name that TFDS does not publish: what to do instead of a near name.
UNPUBLISHED = {"imagenet21k": (
    "TFDS does not publish ImageNet-21k: set config.tfds_data_dir to a TFDS build of it "
    "(name imagenet21k, split full), or give an image folder after the config's name "
    "(configs/augreg.py:NAME,DIR)")}
IN_MEMORY_LIMIT_BYTES = 2 << 30  # TFDS datasets up to this size are held in memory
_TFDS_READ_BATCH = 4096


def _tfds_builder(name: str, data_dir: Optional[str]):
  import tensorflow_datasets as tfds
  try:
    return tfds.builder(name, data_dir=data_dir)
  except ValueError:  # not registered, or not even a valid builder name
    close = difflib.get_close_matches(name, ["digits"] + tfds.list_builders(), n=4)
    hint = f"did you mean {', '.join(close)}?" if close else "see tfds.list_builders()"
    hint = UNPUBLISHED.get(name, hint)
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
  if builder.is_prepared() and str(getattr(builder.info.file_format, "value", "")) == (
      "array_record"):  # tfds: NotImplementedError from deep inside tf.data
    raise errors.InvalidInput(
        f"TFDS dataset {builder.name} in {builder.data_dir} is prepared as array_record, "
        "which tf.data cannot read: set config.loader='grain' (or rebuild it with tfds build "
        f"{build_name(builder)} --file_format=tfrecord)")
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
    if not storage.isdir(manual) or not storage.listdir(manual):  # gs:// too
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
                      f"TFDS {builder.name} split {split!r} in {builder.data_dir}",
                      fingerprint.tfds_identity(builder, split))


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


def tfds_split(builder, split: str, features=image_and_label, multi_label: bool = False):
  """One split (any TFDS split string) in memory, or streamed when its share of the
  dataset's size is over IN_MEMORY_LIMIT_BYTES; absent data fails at once."""
  info = builder.info
  if (info.dataset_size or 0) > IN_MEMORY_LIMIT_BYTES:
    num_examples = info.splits[split].num_examples
    total = sum(s.num_examples for s in info.splits.values())
    if info.dataset_size * num_examples / max(total, 1) > IN_MEMORY_LIMIT_BYTES:
      read_tfds(builder, split)  # fails fast if absent
      return StreamingSplit(builder, split, num_examples, features, multi_label)
  return _tfds_in_memory(builder, split, features)


def _check_features(builder, label_feature: str) -> None:
  missing = {"image", label_feature} - set(builder.info.features)
  if missing:
    raise errors.InvalidInput(
        f"TFDS dataset {builder.name} lacks the feature(s) "
        f"{', '.join(sorted(missing))}; only image classification datasets with "
        f"'image' and '{label_feature}' work (config.label_feature names the labels)")


def _is_list(builder, label_feature: str) -> bool:
  """Whether the feature is a list of classes (a Sequence of ClassLabel): multi-hot."""
  return hasattr(builder.info.features[label_feature], "feature")


def _class_names(builder, label_feature: str) -> List[str]:
  feature = builder.info.features[label_feature]
  return list(getattr(feature, "feature", feature).names)  # a Sequence holds its ClassLabel


def image_and_labels(feature: str, num_classes: int):
  """features() of an example with a list of correct classes (e.g. ImageNet ReaL's
  'real_label'): the label is multi-hot int32 [num_classes], all 0 for an empty list."""
  def features(example: dict) -> Tuple[tf.Tensor, tf.Tensor]:
    listed = tf.one_hot(tf.cast(example[feature], tf.int32), num_classes) > 0  # [n, K]
    any_listed = tf.reduce_any(listed, axis=0)  # not reduce_max: it is -2^31 for n = 0
    return example["image"], tf.cast(any_listed, tf.int32)
  return features


def image_and_class(feature: str):
  """features() of an example whose class is the ClassLabel `feature`."""
  if feature == "label":
    return image_and_label
  return lambda example: (example["image"], tf.cast(example[feature], tf.int32))


def label_reader(builder, label_feature: str):
  """(features function, multi-label?, class names) of `label_feature`: int32 labels for
  a ClassLabel, multi-hot for a list of classes (a Sequence of ClassLabel)."""
  _check_features(builder, label_feature)
  names = _class_names(builder, label_feature)
  if _is_list(builder, label_feature):
    return image_and_labels(label_feature, len(names)), True, names
  return image_and_class(label_feature), False, names


def tfds_source(name: str, train_split: str, eval_split: str, *, label_feature: str = "label",
                data_dir=None, manual_dir=None, download=False):
  """A TFDS dataset; touches the network only with download=True (then it may take
  minutes; offline it fails in seconds), otherwise a missing dataset fails at once."""
  builder = prepared_builder(name, data_dir=data_dir, manual_dir=manual_dir,
                             download=download)
  features, multi_label, names = label_reader(builder, label_feature)
  if (builder.info.dataset_size or 0) > IN_MEMORY_LIMIT_BYTES:
    read_tfds(builder, train_split)  # fails fast if absent
    splits = [StreamingSplit(builder, split, builder.info.splits[split].num_examples,
                             features, multi_label) for split in (train_split, eval_split)]
  else:
    splits = [_tfds_in_memory(builder, split, features) for split in (train_split, eval_split)]
  return splits[0], splits[1], names


def tfds_eval_source(name: str, split: str, *, label_feature: str = "label", data_dir=None,
                     manual_dir=None, download=False):
  """(split, class names) of a TFDS dataset used for evaluation only. A label_feature
  that is a list of correct classes (e.g. 'real_label') is read as multi-hot."""
  builder = prepared_builder(name, data_dir=data_dir, manual_dir=manual_dir,
                             download=download)
  features, multi_label, names = label_reader(builder, label_feature)
  return tfds_split(builder, split, features, multi_label), names


def tfds_class_count(name: str, data_dir: Optional[str], label_feature: str = "label") -> int:
  """The class count of `label_feature` from TFDS's metadata (no example read)."""
  builder = _tfds_builder(name, data_dir)
  _check_features(builder, label_feature)
  return len(_class_names(builder, label_feature))
