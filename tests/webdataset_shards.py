"""WebDataset tar shards written for the tests (tests/data/sources/test_tar_shards.py,
test_webdataset.py and any test that trains on shards)."""

import io
import os
import tarfile


def write_tar(path, members):
  """A tar file of (name, bytes) members, in order."""
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with tarfile.open(path, "w") as archive:
    for name, data in members:
      info = tarfile.TarInfo(name)
      info.size = len(data)
      archive.addfile(info, io.BytesIO(data))


def write_shards(folder, samples, per_shard=3):
  """Shards 00000.tar, ... of (key, image bytes, caption) samples, each as img2dataset
  writes it: KEY.jpg, KEY.json, KEY.txt."""
  for shard in range(0, len(samples), per_shard):
    members = []
    for key, image, text in samples[shard:shard + per_shard]:
      members += [(f"{key}.jpg", image), (f"{key}.json", b"{}"), (f"{key}.txt", text.encode())]
    write_tar(os.path.join(folder, f"{shard // per_shard:05d}.tar"), members)
