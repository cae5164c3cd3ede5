"""Tar shards in WebDataset's layout read by index: a sample is the members of one shard
that share a key (KEY.jpg and KEY.txt; the key runs to the first dot of the file name).
Each shard's members are listed once, from its tar headers alone (tarfile over a seekable
stream skips the data), local or through vit_jax.base.storage (gs://); an image or a caption
is then one ranged read of its shard, so any example is read in any order."""

import collections
import concurrent.futures
import dataclasses
import io
import itertools
import os
import posixpath
import re
import tarfile
import threading
from typing import Dict, List, Tuple

import numpy as np

from vit_jax.base import console, errors, storage
from vit_jax.data.sources import lazy_rows

IMAGE_EXTENSIONS = ("jpg", "jpeg", "png", "webp")
TEXT_EXTENSION = "txt"
_OPEN_SHARDS = 64  # shard handles a process keeps open
_LISTING_THREADS = 16  # shards whose headers are read at once
_STORE_BLOCK = 8 << 20  # bytes per request when a shard's headers are read from a store


def expand(pattern: str) -> List[str]:
  """The paths a shard pattern names: braces expanded as WebDataset does
  ('{000..009}' zero-padded ranges, '{a,b}' alternatives), in order."""
  match = re.search(r"\{([^{}]*)\}", pattern)
  if match is None:
    return [pattern]
  body = match.group(1)
  span = re.fullmatch(r"(\d+)\.\.(\d+)", body)
  if span:
    first, last = span.groups()
    width = len(first)
    choices = [str(i).zfill(width) for i in range(int(first), int(last) + 1)]
  else:
    choices = body.split(",")
  head, tail = pattern[:match.start()], pattern[match.end():]
  return list(itertools.chain.from_iterable(expand(head + choice + tail)
                                            for choice in choices))


def shard_paths(pattern: str) -> List[str]:
  """The shards of a pattern, or of a folder (local or a gs:// prefix): its *.tar files."""
  location = os.path.expanduser(pattern)
  if "{" not in location and not location.endswith(".tar") and storage.isdir(location):
    found = [storage.join(location, name) for name in storage.listdir(location)
             if name.endswith(".tar")]
    if not found:
      raise errors.InvalidInput(f"{pattern} holds no *.tar shards: name a folder of "
                                "WebDataset shards or a pattern such as "
                                "shards/{00000..00009}.tar")
    return found
  paths = expand(location)
  missing = [path for path in paths if not storage.isfile(path)]
  if missing:
    more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
    raise FileNotFoundError(f"shard {missing[0]}{more} of {pattern} does not exist; fix the "
                            "pattern or the folder")
  return paths


def sample_key(name: str) -> Tuple[str, str]:
  """(key, extension) of a member, as WebDataset splits them: 'a/b.c.jpg' -> ('a/b', 'c.jpg')."""
  folder, base = posixpath.split(name)
  stem, _, extension = base.partition(".")
  return posixpath.join(folder, stem), extension.lower()


@dataclasses.dataclass
class ShardListing:
  """A shard's regular files: (name, data offset, size), in the order of the archive."""
  path: str
  size: int
  modified: float
  members: List[Tuple[str, int, int]]


def list_members(path: str) -> ShardListing:
  """Reads a shard's tar headers only (on a store, in blocks of _STORE_BLOCK: one request
  per header would cost more than the bytes between them); a damaged or truncated shard is
  one line."""
  try:
    with storage.open_read(path) as handle:
      size = handle.seek(0, io.SEEK_END)
      handle.seek(0)
      stream = io.BufferedReader(handle, _STORE_BLOCK) if storage.is_url(path) else handle
      with tarfile.open(fileobj=stream, mode="r:") as archive:
        members = [(m.name, m.offset_data, m.size) for m in archive if m.isfile()]
  except tarfile.TarError as e:  # a truncated shard too: "unexpected end of data"
    raise errors.InvalidInput(f"shard {path} is not a readable tar file ({e}); rewrite it, "
                              "or leave it out of the pattern") from None
  return ShardListing(path, size, storage.modified_time(path), members)


def list_shards(paths: List[str]) -> List[ShardListing]:
  """Every shard's listing, several shards at once (each is a few reads per member on a
  store), in the order of `paths`."""
  with console.stage(f"reading the tar headers of {len(paths)} shard(s)") as outcome:
    with concurrent.futures.ThreadPoolExecutor(min(_LISTING_THREADS, len(paths))) as pool:
      listings = list(pool.map(list_members, paths))
    outcome(f"{sum(len(listing.members) for listing in listings)} files")
  return listings


@dataclasses.dataclass
class Samples:
  """Image-text samples: per sample its shard and the byte ranges of its image and text."""
  shard: np.ndarray  # int32 [N]
  image: np.ndarray  # int64 [N, 2]: offset, size
  text: np.ndarray  # int64 [N, 2]
  without_text: int  # images left out, and texts
  without_image: int

  def __len__(self):
    return len(self.shard)


def pair(listings: List[ShardListing]) -> Samples:
  """The samples with both an image (IMAGE_EXTENSIONS) and a KEY.txt, in shard and
  archive order (a key's first image counts); other files (KEY.json, ...) are ignored."""
  shards, images, texts = [], [], []
  without_text = without_image = 0
  for number, listing in enumerate(listings):
    found: Dict[str, List] = collections.OrderedDict()
    for name, offset, size in listing.members:
      key, extension = sample_key(name)
      slot = 0 if extension in IMAGE_EXTENSIONS else 1 if extension == TEXT_EXTENSION else None
      if slot is not None:
        entry = found.setdefault(key, [None, None])
        entry[slot] = entry[slot] or (offset, size)
    for image, text in found.values():
      if image and text:
        shards.append(number)
        images.append(image)
        texts.append(text)
      else:
        without_text += text is None
        without_image += image is None
  return Samples(np.array(shards, np.int32), np.array(images, np.int64).reshape(-1, 2),
                 np.array(texts, np.int64).reshape(-1, 2), without_text, without_image)


class Shards:
  """Byte ranges of a set of shard files. Each process opens its own handles and keeps
  the _OPEN_SHARDS it used last open; threads read different shards at once. It pickles
  as its paths (Grain's worker processes)."""

  def __init__(self, paths: List[str]):
    self.paths = list(paths)
    self._reset()

  def _reset(self):
    self._pid = os.getpid()
    self._handles: "collections.OrderedDict[int, object]" = collections.OrderedDict()
    self._locks: Dict[int, threading.Lock] = {}  # per shard: one seek and read at a time
    self._lock = threading.Lock()  # the two tables

  def __getstate__(self):
    return {"paths": self.paths}

  def __setstate__(self, state):
    self.paths = state["paths"]
    self._reset()

  def _handle(self, shard: int):
    with self._lock:
      if self._pid != os.getpid():  # a forked worker: the parent's handles are not its own
        self._reset()
      handle = self._handles.pop(shard, None)
      if handle is None:
        handle = storage.open_read(self.paths[shard])
      self._handles[shard] = handle  # most recently used last
      if len(self._handles) > _OPEN_SHARDS:
        oldest, stale = self._handles.popitem(last=False)
        with self._locks[oldest]:  # after the read in progress (readers skip closed ones)
          stale.close()
      return handle, self._locks.setdefault(shard, threading.Lock())

  def read(self, shard: int, offset: int, size: int) -> bytes:
    while True:
      handle, lock = self._handle(shard)
      with lock:
        if not handle.closed:  # else closed since it was handed out: open it again
          handle.seek(offset)
          data = handle.read(size)
          break
    if len(data) != size:
      raise OSError(f"shard {self.paths[shard]} ends inside a member at byte {offset} "
                    f"({len(data)} of {size} bytes): it was truncated after it was listed")
    return data

  def close(self) -> None:
    """Closes this process's handles (a store's file left open keeps a read-ahead task
    pending); reads after it open them again."""
    with self._lock:
      handles = list(self._handles.values()) if self._pid == os.getpid() else []
      self._handles.clear()
    for handle in handles:
      handle.close()

  def __del__(self):
    self.close()


class Images(lazy_rows.Rows):
  """The encoded image of each sample, read by index."""

  def __init__(self, shards: Shards, samples: Samples):
    self.shards, self.shard, self.ranges = shards, samples.shard, samples.image

  def __len__(self):
    return len(self.shard)

  def read(self, index: int) -> bytes:
    offset, size = self.ranges[index]
    return self.shards.read(int(self.shard[index]), int(offset), int(size))


class Captions:
  """The caption of each sample (its KEY.txt, UTF-8, surrounding blanks dropped), read by
  index: of(i) is a list, as every split's captions are."""

  def __init__(self, shards: Shards, samples: Samples):
    self.shards, self.shard, self.ranges = shards, samples.shard, samples.text

  def __len__(self):
    return len(self.shard)

  def of(self, index: int) -> List[str]:
    offset, size = self.ranges[index]
    text = self.shards.read(int(self.shard[index]), int(offset), int(size))
    return [text.decode("utf-8", errors="replace").strip()]
