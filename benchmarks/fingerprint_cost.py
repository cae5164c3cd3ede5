"""Seconds of a split's dataset fingerprint (vit_jax.data.fingerprint) on a large folder:
what every start and resume of a run pays per split, beside hashing every file's bytes
(what it does not do, docs/fingerprint.md).

  python benchmarks/fingerprint_cost.py --files=100000

Writes that many small files (200 bytes, 100 class folders) in a temporary folder, times
the fingerprint of a class-folder and of a multi-label split over them (twice each: the
first with a cold stat cache as far as the page cache allows), then sha256 of every file,
and removes the folder.
"""

import argparse
import hashlib
import json
import os
import shutil
import tempfile
import time

import numpy as np

from vit_jax.data import fingerprint
from vit_jax.data.splits import IndexedSplit


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--files", type=int, default=100_000)
  args = parser.parse_args()
  root = tempfile.mkdtemp(prefix="fingerprint-cost-")
  try:
    paths = []
    for i in range(args.files):
      folder = os.path.join(root, "train", f"c{i % 100}")
      os.makedirs(folder, exist_ok=True)
      path = os.path.join(folder, f"{i}.png")
      with open(path, "wb") as f:
        f.write(os.urandom(200))
      paths.append(os.fsencode(path))
    labels = np.arange(args.files) % 100
    kinds = {"class folders": labels.astype(np.int32),
             "multi-label": np.eye(100, dtype=np.int32)[labels]}
    for kind, split_labels in kinds.items():
      split = IndexedSplit(np.array(paths, object), split_labels, "files")
      for attempt in range(2):
        started = time.perf_counter()
        record = fingerprint.of_split(split)
        seconds = time.perf_counter() - started
        print(f"{kind}, run {attempt + 1}: {seconds:.2f} s, "
              f"{len(json.dumps(record)) / 1e6:.1f} MB in dataset.json")
    started = time.perf_counter()
    for path in paths:
      with open(path, "rb") as f:
        hashlib.sha256(f.read())
    print(f"sha256 of every file's bytes: {time.perf_counter() - started:.2f} s")
  finally:
    shutil.rmtree(root)


if __name__ == "__main__":
  main()
