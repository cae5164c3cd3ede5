"""ArrayRecord shards: a dataset as a folder the Grain loader reads by index, written by
python -m vit_jax.make_arrayrecord from an image folder, a TFDS split or captions files.

DIR/arrayrecord.json     class names, multi_label, and per split its shards, example
                         count and fingerprint (the source's: vit_jax.data.fingerprint),
                         and its captions file where it has one
DIR/<split>.labels.npy   int32 [N] (multi-label: multi-hot [N, K]): labels without reading
                         an image (zeros for captions without classes)
DIR/<split>.captions.json   each example's captions (a list of lists of strings), read
                         into memory: captions without reading an image
DIR/<split>-00000-of-00004.array_record, ...   one record per example: the encoded image

Writing is atomic and resumable: each shard is written to a temporary name and renamed,
a rerun skips finished shards (after checking that the source is the one they came
from), and arrayrecord.json, written last, is what makes a split readable.
"""

import errno
import json
import os
from typing import Callable, Dict, List, Optional

import numpy as np

from vit_jax.base import errors, storage
from vit_jax.data.sources import arrayrecord_output, source_contract
from vit_jax.data.splits import Captions, IndexedSplit

INDEX = "arrayrecord.json"
FORMAT = 1
_PENDING = ".pending.json"  # a split being written: its source's fingerprint


def is_arrayrecord_dir(root: str) -> bool:
  return os.path.isfile(os.path.join(os.path.expanduser(root), INDEX))


def captions_name(split: str) -> str:
  return f"{split}.captions.json"


def shard_names(split: str, num_shards: int) -> List[str]:
  return [f"{split}-{i:05d}-of-{num_shards:05d}.array_record" for i in range(num_shards)]


def read_index(root: str) -> dict:
  """arrayrecord.json, or one line saying what is wrong with it."""
  path = os.path.join(os.path.expanduser(root), INDEX)
  try:
    index = json.loads(storage.read_text(path))
  except (OSError, ValueError) as e:
    raise errors.InvalidInput(f"cannot read {path}: {e}; rewrite it with python -m "
                              "vit_jax.make_arrayrecord") from None
  if index.get("format") != FORMAT:
    raise errors.InvalidInput(f"{path} has format {index.get('format')!r}, not {FORMAT}; "
                              "rewrite it with python -m vit_jax.make_arrayrecord")
  return index


class Records:
  """Random access to the encoded images of a split's shards (grain's ArrayRecord data
  source; picklable, so worker processes open their own readers)."""

  def __init__(self, paths: List[str]):
    import grain  # pylint: disable=import-outside-toplevel
    self.paths = paths
    try:
      self._source = grain.sources.ArrayRecordDataSource(paths)
    except RuntimeError as e:  # the C++ reader's, at times without a message
      damaged, reason = _first_damaged(paths, e)
      raise errors.InvalidInput(f"ArrayRecord shard {damaged} is damaged ({reason}); "
                                "rewrite the folder with python -m vit_jax.make_arrayrecord "
                                "(to a new --output)") from None

  def __len__(self):
    return len(self._source)

  def __getitem__(self, index: int) -> bytes:
    try:
      return self._source[int(index)]
    except RuntimeError as e:  # a damaged record: the caller names the example
      raise OSError(f"damaged ArrayRecord shard ({_reason(e)})") from None

  def __getstate__(self):
    return {"paths": self.paths}

  def __setstate__(self, state):
    self.__init__(state["paths"])


def _reason(error: RuntimeError) -> str:
  return " ".join(str(error).split()) or "truncated, or not an ArrayRecord file"


def _first_damaged(paths: List[str], error: RuntimeError):
  """(the first shard that does not open alone, why) for a set that did not open."""
  import grain  # pylint: disable=import-outside-toplevel
  for path in paths:
    try:
      grain.sources.ArrayRecordDataSource([path])
    except RuntimeError as e:
      return path, _reason(e)
  return ", ".join(paths), _reason(error)


def open_split(root: str, split: str, index: Optional[dict] = None) -> IndexedSplit:
  """One split of an ArrayRecord folder; a missing split or shard is one line."""
  root = os.path.expanduser(root)
  index = index or read_index(root)
  if split not in index["splits"]:
    raise errors.InvalidInput(f"{root} has no split {split!r} (it has "
                              f"{', '.join(sorted(index['splits']))}); set "
                              "config.train_split / eval_split to one of them")
  entry = index["splits"][split]
  paths = [os.path.join(root, name) for name in entry["shards"]]
  missing = [path for path in paths if not os.path.isfile(path)]
  if missing:
    raise FileNotFoundError(f"ArrayRecord shard {missing[0]} is missing; rerun python -m "
                            "vit_jax.make_arrayrecord to finish the folder")
  labels = np.load(os.path.join(root, f"{split}.labels.npy"))
  records = Records(paths)
  if len(records) != len(labels) or len(labels) != entry["examples"]:
    raise errors.InvalidInput(f"{root}: split {split} has {len(records)} records and "
                              f"{len(labels)} labels, not {entry['examples']}; rewrite it")
  return IndexedSplit(records, labels.astype(np.int32), "encoded",
                      source=os.path.join(root, split), fingerprint=entry["fingerprint"],
                      captions=_read_captions(root, split, entry))


def _read_captions(root: str, split: str, entry: dict) -> Optional[Captions]:
  """The split's captions (None for classification shards), one list per example."""
  if "captions" not in entry:
    return None
  path = os.path.join(root, entry["captions"])
  try:
    grouped = json.loads(storage.read_text(path))
  except (OSError, ValueError) as e:
    raise errors.InvalidInput(f"cannot read {path} ({e}); rerun python -m "
                              "vit_jax.make_arrayrecord to finish the folder") from None
  if len(grouped) != entry["examples"]:
    raise errors.InvalidInput(f"{path} holds captions of {len(grouped)} examples, not "
                              f"{entry['examples']}; rewrite split {split}")
  return Captions.grouped(grouped)


def arrayrecord_source(root: str, train_split: Optional[str], eval_split: Optional[str]):
  """(train, eval, class names); the eval split defaults to test, else validation."""
  index = read_index(root)
  if eval_split is None:
    eval_split = next((name for name in ("test", "validation") if name in index["splits"]),
                      "test")
  return (open_split(root, train_split or "train", index),
          open_split(root, eval_split, index), list(index["class_names"]))


def class_names(root: str) -> List[str]:
  return list(read_index(root)["class_names"])


class ArrayRecordFolder:
  """A folder with arrayrecord.json, read by the Grain loader only."""
  loaders = ("grain",)
  takes_label_feature = False

  def handles(self, config) -> bool:
    return source_contract.is_path(config.dataset) and is_arrayrecord_dir(config.dataset)

  def _check_loader(self, name: str, loader: str) -> None:
    source_contract.check_loader(self, loader, f"{name} holds ArrayRecord shards, which the "
                                 "Grain loader reads: set config.loader='grain'")

  def open(self, config, loader):
    self._check_loader(config.dataset, loader)
    return arrayrecord_source(config.dataset, config.train_split, config.eval_split)

  def class_count(self, config) -> int:
    return len(class_names(config.dataset))

  def open_eval(self, name, split, config, label_feature, loader):
    if not (source_contract.is_path(name) and is_arrayrecord_dir(name)):
      return None
    self._check_loader(name, loader)
    source_contract.labels_only(name, label_feature)
    _, evaluation, names = arrayrecord_source(name, None, None)
    return evaluation, names


SOURCE = ArrayRecordFolder()


def _write_shard(path: str, payloads) -> None:
  from array_record.python import array_record_module  # pylint: disable=import-outside-toplevel
  temporary = f"{path}.tmp"
  writer = array_record_module.ArrayRecordWriter(temporary, "group_size:1")
  try:
    try:
      for payload in payloads:
        writer.write(payload)
    finally:
      writer.close()
  except RuntimeError as e:  # the C++ writer's: a full disk is the user's one line
    if "No space left on device" not in str(e):
      raise
    os.remove(temporary)
    raise OSError(errno.ENOSPC, "No space left on device", path) from None
  os.replace(temporary, path)  # atomic: a shard that exists is complete


def write_split(root: str, split: str, payload: Callable[[int], bytes], labels: np.ndarray,
                fingerprint: Dict[str, object], names: List[str], *,
                captions: Optional[List[List[str]]] = None,
                examples_per_shard: int = 10_000, progress=None) -> None:
  """Writes `split` (payload(i): example i's encoded image; captions[i]: its captions, for
  image-text data) into root, skipping shards a previous run finished, then records it in
  arrayrecord.json. `progress(n)` is called with the examples done (the tqdm bar's
  update)."""
  os.makedirs(root, exist_ok=True)
  pending = os.path.join(root, f"{split}{_PENDING}")
  path = os.path.join(root, INDEX)
  written = read_index(root)["splits"].get(split) if os.path.isfile(path) else None
  started = (json.loads(storage.read_text(pending)) if os.path.isfile(pending)
             else written["fingerprint"] if written else None)
  if started is not None:
    if started["sha256"] != fingerprint["sha256"]:
      raise errors.InvalidInput(f"{root} holds shards of split {split} written from other "
                                "data (its fingerprint differs); remove the folder or write "
                                "to another --output")
  else:
    storage.write_atomic(pending, json.dumps(fingerprint))
  total = len(labels)
  num_shards = max(1, -(-total // examples_per_shard))
  shards = shard_names(split, num_shards)
  arrayrecord_output.check_shard_count(root, split, shards)
  for shard, name in enumerate(shards):
    begin, end = shard * examples_per_shard, min(total, (shard + 1) * examples_per_shard)
    if not os.path.isfile(os.path.join(root, name)):
      _write_shard(os.path.join(root, name), (payload(i) for i in range(begin, end)))
    if progress is not None:
      progress(end - begin)
  np.save(os.path.join(root, f"{split}.labels.npy.tmp.npy"), np.asarray(labels, np.int32))
  os.replace(os.path.join(root, f"{split}.labels.npy.tmp.npy"),
             os.path.join(root, f"{split}.labels.npy"))
  index = read_index(root) if os.path.isfile(path) else {"format": FORMAT, "splits": {}}
  index.update(class_names=list(names),
               multi_label=bool(np.asarray(labels).ndim == 2))
  index["splits"][split] = {"shards": shards, "examples": total, "fingerprint": fingerprint}
  if captions is not None:
    storage.write_atomic(os.path.join(root, captions_name(split)),
                         json.dumps([list(texts) for texts in captions], ensure_ascii=False))
    index["splits"][split]["captions"] = captions_name(split)
  storage.write_atomic(path, json.dumps(index, indent=1))
  if os.path.isfile(pending):
    os.remove(pending)
