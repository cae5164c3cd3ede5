"""WebDataset tar shards (what img2dataset writes and open_clip reads: per sample KEY.jpg,
.jpeg, .png or .webp and KEY.txt, its caption; KEY.json and other files are ignored),
local or on gs://, read by the Grain loader by index (tar_shards): the same order, resume
and seeds as every split read by index.

config.dataset='webdataset:PATTERN', or a pattern ending in .tar, or a folder (gs://
prefix) of *.tar: PATTERN as WebDataset writes it, shards/{00000..00099}.tar. The eval
split is config.eval_split, the held-out shards in any of these forms. A sample without its
image or its text is left out with a warning that counts them; shards where nothing pairs
are one line."""

import hashlib
import json
import os
from typing import List

import numpy as np

from vit_jax.base import console, errors, storage
from vit_jax.data.sources import source_contract, tar_shards
from vit_jax.data.splits import IndexedSplit

PREFIX = "webdataset:"


def pattern_of(name: str) -> str:
  return name[len(PREFIX):] if name.startswith(PREFIX) else name


def is_shards(name: str) -> bool:
  """Whether a dataset name is tar shards: the prefix, a name ending in .tar, or a
  folder whose files include *.tar (told from its listing, no shard opened)."""
  if name.startswith(PREFIX) or name.endswith(".tar"):
    return True
  location = os.path.expanduser(name)
  local = source_contract.is_path(name) and os.path.isdir(location)
  if not (local or storage.is_url(name)):
    return False
  return any(entry.endswith(".tar") for entry in storage.listdir(location))


def _fingerprint(listings: List[tar_shards.ShardListing], examples: int) -> dict:
  """Each shard's name (below the folder they share), size and modification time: a shard
  rewritten, added or removed changes it, without reading a sample. The captions are in
  the shards, which their entry says (vit_jax.data.fingerprint then reads none, and a
  change is told as the examples')."""
  paths = [listing.path for listing in listings]
  folder = os.path.commonprefix(paths)
  folder = folder[:folder.rfind("/") + 1]
  found = {"kind": "webdataset", "examples": examples,
           "shards": {path[len(folder):]: [listing.size, listing.modified]
                      for path, listing in zip(paths, listings)}}
  digest = hashlib.sha256(json.dumps(found, sort_keys=True).encode()).hexdigest()
  return {**found, "sha256": digest, "captions": "in the shards"}


def open_split(pattern: str) -> IndexedSplit:
  """The image-text samples of a shard pattern, read by index; labels are zeros."""
  paths = tar_shards.shard_paths(pattern)
  listings = tar_shards.list_shards(paths)
  samples = tar_shards.pair(listings)
  if not len(samples):
    raise errors.InvalidInput(
        f"{pattern}: no sample has both an image ({', '.join(tar_shards.IMAGE_EXTENSIONS)}) "
        f"and a caption (.txt) under one key in {len(paths)} shard(s); WebDataset shards "
        "hold KEY.jpg and KEY.txt per sample (img2dataset --output_format=webdataset)")
  if samples.without_text or samples.without_image:
    console.log.warning("%s: %d image(s) without a .txt and %d .txt without an image left "
                        "out; %d samples read", pattern, samples.without_text,
                        samples.without_image, len(samples))
  shards = tar_shards.Shards(paths)
  return IndexedSplit(tar_shards.Images(shards, samples), np.zeros(len(samples), np.int32),
                      "encoded", source=f"WebDataset {pattern}",
                      captions=tar_shards.Captions(shards, samples),
                      fingerprint=_fingerprint(listings, len(samples)))


class WebDatasetShards:
  """WebDataset tar shards, read by the Grain loader only."""
  loaders = ("grain",)
  takes_label_feature = False

  def handles(self, config) -> bool:
    return is_shards(config.dataset)

  def _check_loader(self, name: str, loader: str) -> None:
    source_contract.check_loader(self, loader, f"{name} is WebDataset tar shards, which the "
                                 "Grain loader reads: set config.loader='grain'")

  def open(self, config, loader):
    self._check_loader(config.dataset, loader)
    if not config.eval_split:
      raise errors.InvalidInput(f"{config.dataset} is WebDataset shards: set "
                                "config.eval_split to the held-out shards (a pattern or a "
                                "folder of *.tar)")
    return (open_split(pattern_of(config.dataset)), open_split(pattern_of(config.eval_split)),
            [])

  def class_count(self, config) -> int:
    return 0

  def open_eval(self, name, split, config, label_feature, loader):
    if not is_shards(name):
      return None
    self._check_loader(name, loader)
    source_contract.labels_only(name, label_feature)
    return open_split(pattern_of(name)), []


SOURCE = WebDatasetShards()
