"""python -m vit_jax.make_arrayrecord: an image folder or a TFDS split as ArrayRecord shards
that the Grain loader reads as it reads the source (same batches, same fingerprint);
resumable after a kill, refusing shards of other data; the TFDS data source path."""

import os

import numpy as np
import pytest
import tensorflow_datasets as tfds

from helpers import make_config, run_in_process, train, write_image
from vit_jax import make_arrayrecord
from vit_jax.base import errors
from vit_jax.data import fingerprint, loaders, splits, text_tokens
from vit_jax.data.sources import arrayrecord, registry


def _with(config, **keys):
  config.update(**keys)
  return config


def grain_config(dataset, **keys):
  config = make_config(dataset)
  config.update(loader="grain", **keys)
  return config


def image_folder(root):
  for split, count in (("train", 5), ("test", 2)):
    for name in ("cat", "dog"):
      for i in range(count):
        write_image(str(root / split / name / f"{i}.png"), size=(12 + i, 10))
  return root


def test_folder_shards_read_as_the_folder_and_resume(tmp_path):
  folder, output = image_folder(tmp_path / "images"), tmp_path / "shards"
  done = run_in_process(make_arrayrecord, str(folder), f"--output={output}",
                        "--examples_per_shard=3")
  assert done.returncode == 0, done.stderr
  assert sorted(os.listdir(output)) == [
      "arrayrecord.json", "test-00000-of-00002.array_record",
      "test-00001-of-00002.array_record", "test.labels.npy",
      *[f"train-0000{i}-of-00004.array_record" for i in range(4)], "train.labels.npy"]
  from_folder = loaders.open_dataset(grain_config(str(folder)))
  from_shards = loaders.open_dataset(grain_config(str(output)))
  assert from_shards.info == from_folder.info
  assert from_shards.fingerprints() == from_folder.fingerprints()
  for ours, theirs in zip(train(from_shards, batch_size=4), train(from_folder, batch_size=4)):
    for key in ours:
      np.testing.assert_array_equal(ours[key], theirs[key])

  # A kill mid-write: the shard being written is a .tmp, never a finished-looking shard.
  shard = output / "train-00002-of-00004.array_record"
  kept = (output / "train-00000-of-00004.array_record").stat().st_mtime_ns
  shard.rename(f"{shard}.tmp")
  assert run_in_process(make_arrayrecord, str(folder), f"--output={output}",
                        "--examples_per_shard=3").returncode == 0
  assert shard.is_file()
  assert (output / "train-00000-of-00004.array_record").stat().st_mtime_ns == kept
  write_image(str(folder / "train" / "cat" / "new.png"))  # other data: refused, one line
  done = run_in_process(make_arrayrecord, str(folder), f"--output={output}",
                        "--examples_per_shard=3")
  assert done.returncode == 1
  assert done.stderr.strip().splitlines()[-1] == (
      f"error: {output} holds shards of split train written from other data (its "
      "fingerprint differs); remove the folder or write to another --output")
  with pytest.raises(errors.InvalidInput, match="ArrayRecord shards, which the Grain loader "
                     r"reads: set config.loader='grain'"):
    loaders.open_dataset(make_config(str(output)))


def test_tfds_split_through_data_source_and_as_shards(tmp_path):
  """tfds's offline dummy_mnist (20 + 20 PNGs), prepared as array_record."""
  data_dir = str(tmp_path / "tfds")
  tfds.testing.DummyMnist(data_dir=data_dir, file_format="array_record").download_and_prepare()
  direct = loaders.open_dataset(grain_config("dummy_mnist", tfds_data_dir=data_dir))
  assert (direct.info.num_train, direct.info.num_eval, direct.info.num_classes) == (20, 20, 10)
  assert direct.fingerprints()["train"]["kind"] == "tfds"
  batch = train(direct, num_steps=1, batch_size=4)[0]
  assert batch["image"].shape == (4, 16, 16, 3)
  output = tmp_path / "shards"
  make_arrayrecord.write("dummy_mnist", str(output), splits=["train", "test"],
                         tfds_data_dir=data_dir)
  shards = loaders.open_dataset(grain_config(str(output)))
  assert shards.fingerprints() == direct.fingerprints()
  assert arrayrecord.class_names(str(output)) == [str(d) for d in range(10)]
  np.testing.assert_array_equal(train(shards, num_steps=1, batch_size=4)[0]["image"],
                                batch["image"])
  with pytest.raises(errors.InvalidInput, match=(
      r"^TFDS dataset dummy_mnist has no split 'validation' \(it has test, train\); set "
      "config.train_split / eval_split to one of them$")):
    loaders.open_dataset(grain_config("dummy_mnist", tfds_data_dir=data_dir,
                                      eval_split="validation"))
  with pytest.raises(errors.InvalidInput, match=(  # tf.data reads TFRecords only
      r"^TFDS dataset dummy_mnist in .* is prepared as array_record, which tf.data cannot "
      r"read: set config.loader='grain' \(or rebuild it with tfds build dummy_mnist:.* "
      r"--file_format=tfrecord\)$")):
    loaders.open_dataset(_with(make_config("dummy_mnist"), tfds_data_dir=data_dir))


def test_output_that_is_not_the_shards_own_folder_is_one_line_before_writing(tmp_path):
  folder = image_folder(tmp_path / "images")
  workdir = tmp_path / "run"
  workdir.mkdir()
  (workdir / "config.json").write_text("{}")
  (tmp_path / "a_file").write_text("")
  before = sorted(str(p) for p in tmp_path.rglob("*"))
  for output, says in [
      (folder, f"--output={folder} is the source folder {folder}: the shards would become "
               "part of the data it reads; name a folder outside it"),
      (folder / "train" / "shards", "is inside the source folder"),
      (workdir, f"--output={workdir} already holds files make_arrayrecord did not write "
                "(config.json): name a new or empty folder"),
      (tmp_path / "a_file", "is a file, not a folder: name a new folder for the shards")]:
    done = run_in_process(make_arrayrecord, str(folder), f"--output={output}")
    (line,) = done.stderr.strip().splitlines()
    assert done.returncode == 1 and line.startswith("error: ") and says in line, done.stderr
  assert sorted(str(p) for p in tmp_path.rglob("*")) == before  # nothing written


def test_a_changed_examples_per_shard_does_not_write_a_second_set(tmp_path):
  folder, output = image_folder(tmp_path / "images"), tmp_path / "shards"
  assert run_in_process(make_arrayrecord, str(folder), f"--output={output}",
                        "--examples_per_shard=3").returncode == 0
  before = sorted(os.listdir(output))
  done = run_in_process(make_arrayrecord, str(folder), f"--output={output}",
                        "--examples_per_shard=4")
  assert done.returncode == 1 and done.stderr.strip().splitlines()[-1] == (
      f"error: {output} holds split train in 4 shard(s); this --examples_per_shard writes 3: "
      "rerun with the --examples_per_shard that wrote them, or write to another --output")
  assert sorted(os.listdir(output)) == before


def test_a_full_disk_is_one_line_and_the_rerun_finishes(tmp_path):
  folder, output = image_folder(tmp_path / "images"), tmp_path / "shards"
  output.mkdir()
  full = output / "train-00000-of-00001.array_record.tmp"
  full.symlink_to("/dev/full")  # the shard being written: every write fails with ENOSPC
  done = run_in_process(make_arrayrecord, str(folder), f"--output={output}")
  assert done.returncode == 1 and done.stderr.strip().splitlines()[-1] == (
      f"error: disk full writing {output}/train-00000-of-00001.array_record (No space left on "
      "device): free some space and rerun the same command; finished checkpoints are intact")
  assert "Traceback" not in done.stderr and not os.path.lexists(full)
  assert run_in_process(make_arrayrecord, str(folder), f"--output={output}").returncode == 0


def test_damaged_shards_are_one_line_naming_them(tmp_path):
  folder, output = image_folder(tmp_path / "images"), tmp_path / "shards"
  assert run_in_process(make_arrayrecord, str(folder), f"--output={output}",
                        "--examples_per_shard=3").returncode == 0
  shard = output / "train-00001-of-00004.array_record"
  whole = shard.read_bytes()
  shard.write_bytes(whole[:len(whole) // 2])  # truncated: the reader's bare RuntimeError
  with pytest.raises(errors.InvalidInput, match=(
      f"^ArrayRecord shard {shard} is damaged \\(truncated, or not an ArrayRecord file\\); "
      "rewrite the folder")):
    loaders.open_dataset(grain_config(str(output)))
  flipped = bytearray(whole)
  flipped[300:364] = b"z" * 64  # a record's bytes changed
  shard.write_bytes(bytes(flipped))
  dataset = loaders.open_dataset(grain_config(str(output)))
  with pytest.raises(splits.CorruptImageError, match=(
      f"^corrupt image: example [345] of {output}/train: damaged ArrayRecord shard \\(.*\\); "
      "rebuild the dataset")):
    train(dataset, num_steps=5, batch_size=10)


def captions_files(root):
  """train.tsv (an image with two captions, a name not in ASCII) and val.tsv, beside their
  images."""
  for name in ("a", "b", "c", "d"):
    write_image(str(root / f"{name}.png"), size=(12, 10))
  (root / "train.tsv").write_text("a.png\ta cat\nb.png\ta dog\na.png\tthe same cat\n"
                                  "c.png\tun café\n", encoding="utf-8")
  (root / "val.tsv").write_text("d.png\ta bird\n", encoding="utf-8")
  return root


def test_captions_files_as_shards_keep_every_caption_and_the_fingerprint(tmp_path):
  root, output = captions_files(tmp_path / "images"), tmp_path / "shards"
  done = run_in_process(make_arrayrecord, f"--captions={root}/train.tsv",
                        f"--eval_captions={root}/val.tsv", f"--output={output}",
                        "--examples_per_shard=2")
  assert done.returncode == 0, done.stderr
  assert "train 3, test 1 examples, 5 captions" in done.stdout
  assert sorted(os.listdir(output)) == [
      "arrayrecord.json", "test-00000-of-00001.array_record", "test.captions.json",
      "test.labels.npy", "train-00000-of-00002.array_record",
      "train-00001-of-00002.array_record", "train.captions.json", "train.labels.npy"]
  contrastive = dict(objective="contrastive")
  shards = registry.open_source(grain_config(str(output), **contrastive), loader="grain")
  files = registry.open_source(grain_config(f"captions:{root}/train.tsv", eval_split="val.tsv",
                                            **contrastive), loader="grain")
  assert shards[2] == files[2] == []
  for ours, theirs in zip(shards[:2], files[:2]):
    assert [ours.captions.of(i) for i in range(len(ours))] == [
        theirs.captions.of(i) for i in range(len(theirs))]
    assert [ours.data[i] for i in range(len(ours))] == [
        (root / os.fsdecode(path)).read_bytes() for path in theirs.data]
    assert fingerprint.of_split(ours) == fingerprint.of_split(theirs)
  assert shards[0].captions.of(0) == ["a cat", "the same cat"]
  vocab = text_tokens.train_wordpiece(["a cat", "a dog", "the same cat", "un café"], 30,
                                      str(tmp_path / "vocab.txt"))
  text = dict(text={"tokenizer": vocab, "length": 6, "lower": False}, **contrastive)
  batches = [train(loaders.open_dataset(config), num_steps=2, batch_size=4) for config in (
      grain_config(str(output), **text),
      grain_config(f"captions:{root}/train.tsv", eval_split="val.tsv", **text))]
  for ours, theirs in zip(*batches):
    for key in ("image", "text", "label"):
      np.testing.assert_array_equal(ours[key], theirs[key])
  done = run_in_process(make_arrayrecord, str(root), f"--captions={root}/train.tsv",
                        f"--output={tmp_path / 'other'}")
  assert done.returncode != 0 and "give either SOURCE or --captions / --eval_captions, not " \
      "both" in done.stderr
