"""Tar shards read by index: patterns, members listed from headers alone, samples paired
by key, byte ranges read back, and damaged shards in one line."""

import os
import pickle

import numpy as np
import pytest

from webdataset_shards import write_tar
from vit_jax.base import errors
from vit_jax.data.sources import tar_shards


def test_braces_expand_as_webdataset_does():
  assert tar_shards.expand("a/{008..011}.tar") == [f"a/{i:03d}.tar" for i in range(8, 12)]
  assert tar_shards.expand("{x,y}-{0..1}.tar") == ["x-0.tar", "x-1.tar", "y-0.tar", "y-1.tar"]
  assert tar_shards.expand("plain.tar") == ["plain.tar"]


def test_keys_run_to_the_first_dot_of_the_file_name():
  assert tar_shards.sample_key("dir.v2/0001.seg.PNG") == ("dir.v2/0001", "seg.png")
  assert tar_shards.sample_key("0001.txt") == ("0001", "txt")


def test_pairs_images_with_their_text_and_reads_them_back_by_range(tmp_path):
  long_name = "d/" + "k" * 120  # past the 100 bytes of a plain tar header: a GNU/pax name
  write_tar(tmp_path / "0.tar", [("a.jpg", b"A" * 700), ("a.json", b"{}"), ("a.txt", b" cat \n"),
                                 ("b.png", b"B"), ("c.txt", b"orphan text"),
                                 (f"{long_name}.webp", b"W" * 3), (f"{long_name}.txt", b"long")])
  write_tar(tmp_path / "1.tar", [("d.txt", "café".encode()), ("d.jpeg", b"D" * 5),
                                 ("d.png", b"second image of d")])
  listings = tar_shards.list_shards([str(tmp_path / "0.tar"), str(tmp_path / "1.tar")])
  samples = tar_shards.pair(listings)
  assert (samples.without_text, samples.without_image) == (1, 1)
  assert samples.shard.tolist() == [0, 0, 1]
  shards = pickle.loads(pickle.dumps(tar_shards.Shards([l.path for l in listings])))
  images = tar_shards.Images(shards, samples)
  captions = tar_shards.Captions(shards, samples)
  assert [images[i] for i in range(3)] == [b"A" * 700, b"W" * 3, b"D" * 5]
  assert [captions.of(i) for i in range(3)] == [["cat"], ["long"], ["café"]]
  gathered = images[np.array([2, 0])]  # the tf stack's gather: an object array
  assert gathered.dtype == object and list(gathered) == [b"D" * 5, b"A" * 700]
  assert images.shape == (3,) and len(captions) == 3


def test_a_folder_names_its_tar_files_and_a_missing_shard_is_one_line(tmp_path):
  for name in ("1.tar", "0.tar", "notes.md"):
    write_tar(tmp_path / "shards" / name, [])
  assert tar_shards.shard_paths(str(tmp_path / "shards")) == [
      str(tmp_path / "shards" / name) for name in ("0.tar", "1.tar")]
  with pytest.raises(FileNotFoundError, match=r"^shard .*/2.tar of .*\{0..2\}.tar does not "
                     "exist; fix the pattern or the folder$"):
    tar_shards.shard_paths(str(tmp_path / "shards" / "{0..2}.tar"))
  os.makedirs(tmp_path / "empty")
  with pytest.raises(errors.InvalidInput, match=r"empty holds no \*.tar shards"):
    tar_shards.shard_paths(str(tmp_path / "empty"))


def test_damaged_shards_are_one_line(tmp_path):
  write_tar(tmp_path / "whole.tar", [("a.jpg", b"x" * 5000), ("a.txt", b"t")])
  data = (tmp_path / "whole.tar").read_bytes()
  (tmp_path / "cut.tar").write_bytes(data[:2048])  # a.jpg's data ends past the end
  (tmp_path / "junk.tar").write_bytes(b"not a tar" * 100)
  for name, reason in (("cut", "unexpected end of data"), ("junk", "")):
    with pytest.raises(errors.InvalidInput, match=rf"^shard .*{name}.tar is not a readable tar "
                       rf"file \(.*{reason}.*\); rewrite it, or leave it out of the pattern$"):
      tar_shards.list_members(str(tmp_path / f"{name}.tar"))
  listing = tar_shards.list_members(str(tmp_path / "whole.tar"))
  samples = tar_shards.pair([listing])
  (tmp_path / "whole.tar").write_bytes(data[:1000])  # cut after it was listed
  with pytest.raises(OSError, match="ends inside a member .* truncated after it was listed"):
    tar_shards.Images(tar_shards.Shards([listing.path]), samples)[0]


def test_at_most_the_shards_used_last_stay_open_and_reads_go_on(tmp_path, monkeypatch):
  monkeypatch.setattr(tar_shards, "_OPEN_SHARDS", 2)
  paths = [str(tmp_path / f"{i}.tar") for i in range(3)]
  for i, path in enumerate(paths):
    write_tar(path, [(f"{i}.jpg", bytes([i]) * 10), (f"{i}.txt", b"t")])
  samples = tar_shards.pair(tar_shards.list_shards(paths))
  shards = tar_shards.Shards(paths)
  images = tar_shards.Images(shards, samples)
  first, _ = shards._handle(0)  # pylint: disable=protected-access
  assert [images[i] for i in (0, 1, 2, 0)] == [bytes([i]) * 10 for i in (0, 1, 2, 0)]
  assert first.closed and sorted(shards._handles) == [0, 2]  # pylint: disable=protected-access
  shards.close()
  assert not shards._handles and images[1] == bytes([1]) * 10  # pylint: disable=protected-access
