"""dataset.json: a resumed run trains on the classes it started with."""

import json
import os

import pytest

from helpers import demo, sigterm_at_step, write_image
from vit_jax import read_class_names
from vit_jax.data import device_batches, fingerprint
from vit_jax.data.tf_stack import tf_pipeline
from vit_jax.training import loop
from vit_jax.training.runs import dataset_record


def folder_config(root):
  config = demo.get_config(str(root))
  config.update(dict(total_steps=2, batch=4, batch_eval=4, progress_every=1, eval_every=2,
                     checkpoint_every=1, warmup_steps=1))
  config.model.update(dict(hidden_size=16, mlp_dim=32, num_heads=2, num_layers=1))
  config.lock()
  return config


def write_folder(root, classes):
  """Two images per class and split; each class's images of another size (a swap shows)."""
  for split in ("train", "test"):
    for k, name in enumerate(classes):
      for i in range(2):
        write_image(root / split / name / f"{i}.png", size=(20 + k, 20))


def swap(folder, a, b):
  os.rename(folder / a, folder / "swapping")
  os.rename(folder / b, folder / a)
  os.rename(folder / "swapping", folder / b)


def test_a_renamed_class_folder_is_refused_on_resume(tmp_path, monkeypatch):
  data, workdir = tmp_path / "pets", str(tmp_path / "run")
  write_folder(data, ["cat", "dog"])
  with monkeypatch.context() as patch:  # preempted after step 1: every run is one program
    patch.setattr(device_batches, "prefetch_to_device", sigterm_at_step(1))
    assert loop.train_and_evaluate(folder_config(data), workdir)["preempted_at_step"] == 1
  record = json.loads((tmp_path / "run" / "dataset.json").read_text())
  fingerprints = record.pop("fingerprints")
  assert record == {"source": str(data), "train_split": None, "eval_split": None,
                    "num_train": 4, "num_eval": 4, "num_classes": 2,
                    "class_names": ["cat", "dog"], "multi_label": False,
                    "train_class_counts": [2, 2]}
  stats = {f"{c}/{i}.png": (data / "train" / c / f"{i}.png").stat()
           for c in ("cat", "dog") for i in range(2)}
  assert fingerprints["train"]["files"] == {key: [s.st_size, s.st_mtime_ns]
                                            for key, s in stats.items()}
  assert fingerprints["train"]["examples"] == 4

  for split in ("train", "test"):  # labels 0 and 1 would swap
    os.rename(data / split / "cat", data / split / "zz_cat")
  before = sorted(os.listdir(workdir))
  with pytest.raises(dataset_record.ClassesChangedError) as error:
    loop.train_and_evaluate(folder_config(data), workdir)
  message = str(error.value)
  assert "\n" not in message
  assert (f"the classes of {data} changed since this run started in {workdir} (dataset.json): "
          "removed 'cat'; added 'zz_cat'; label 0 was 'cat', now 'dog'; label 1 was 'dog', "
          "now 'zz_cat'; resuming would train on other labels") in message
  assert sorted(os.listdir(workdir)) == before and "run.lock" not in before

  for split in ("train", "test"):
    os.rename(data / split / "zz_cat", data / split / "cat")
  swap(data / "train", "cat", "dog")  # the same class list, every label swapped
  with pytest.raises(dataset_record.DataChangedError) as error:
    loop.train_and_evaluate(folder_config(data), workdir)
  assert str(error.value) == (
      f"the data of {data} changed since this run started in {workdir} (dataset.json): "
      "train split: files 4 relabelled (cat/0.png -> dog/, cat/1.png -> dog/, +2 more); "
      "restore it, use a new --workdir, or pass --config.allow_data_change=True to resume on it")

  swap(data / "train", "cat", "dog")  # restored, plus an image: a change one may accept
  write_image(data / "train" / "cat" / "new.png", size=(20, 20))
  with pytest.raises(dataset_record.DataChangedError, match="train split: files 1 added "
                     r"\(cat/new.png\); restore it"):
    loop.train_and_evaluate(folder_config(data), workdir)
  assert sorted(os.listdir(workdir)) == before
  config = folder_config(data).unlock()
  config.allow_data_change = True
  result = loop.train_and_evaluate(config, workdir)
  assert result["eval/examples"] == 4
  assert read_class_names(os.path.join(workdir, "params.npz")) == ["cat", "dog"]
  record = json.loads((tmp_path / "run" / "dataset.json").read_text())
  assert record["data_changes"] == [{"resumed_at_step": 1,
                                     "changes": {"train": "files 1 added (cat/new.png)"}}]
  assert record["fingerprints"]["train"]["examples"] == 5


@pytest.mark.parametrize("old, new, text", [
    ({"a/1.png": 5, "a/2.png": 6}, {"a/1.png": 5, "a/2.png": 7, "b/3.png": 1},
     "1 added (b/3.png), 1 replaced (a/2.png)"),
    ({"a/1.png": 5, "b/2.png": 6}, {"b/1.png": 5}, "1 relabelled (a/1.png -> b/), 1 removed "
     "(b/2.png)"),
    ({"a/1.png": 5, "b/1.png": 6}, {"a/1.png": 6, "b/1.png": 5},
     "2 relabelled (a/1.png -> b/, b/1.png -> a/)"),
], ids=["added-replaced", "moved-removed", "swapped"])
def test_describe_files_change_counts_each_kind(old, new, text):
  assert fingerprint.describe_files_change(old, new) == text


def test_describe_change_counts_and_truncates():
  old = [f"c{i}" for i in range(10)]
  assert dataset_record.describe_change(old, old + ["new"]) == "added 'new'; 10 -> 11 classes"
  text = dataset_record.describe_change(old, old[1:])
  assert text.startswith("removed 'c0'; label 0 was 'c0', now 'c1';") and "(+5 more)" in text


def test_files_replaced_in_place_keep_their_labels():
  """Replacing a corrupt image is the fix its error names: a resume goes on (with a
  warning, see test_train's corrupt eval image); anything else changes what was seen."""
  def files(**sizes):
    return {"kind": "files", "files": {k.replace("_", "/") + ".png": v for k, v in sizes.items()}}
  assert fingerprint.labels_kept(files(a_1=5, b_2=6), files(a_1=7, b_2=6))
  assert not fingerprint.labels_kept(files(a_1=5, b_2=6), files(a_1=5, b_2=6, b_3=1))
  assert not fingerprint.labels_kept(files(a_1=5, b_1=6), files(a_1=6, b_1=5))  # swapped
  assert not fingerprint.labels_kept({"kind": "tfds", "examples": 5}, {"kind": "tfds"})


def test_labels_exchanged_in_labels_csv_are_refused_on_resume(tmp_path):
  """A multi-label folder's labels live in labels.csv, not in the folders: two rows'
  labels exchanged keep every file, size and count, and must still be refused (the
  record written and checked as the loop does; the run itself: the test above)."""
  data, workdir = tmp_path / "tags", str(tmp_path)

  def record(rows):
    for split in ("train", "test"):
      for i in range(len(rows)):
        if not (data / split / f"{i}.png").exists():
          write_image(data / split / f"{i}.png", size=(20, 20))
      if split == "train" or not (data / split / "labels.csv").exists():
        (data / split / "labels.csv").write_text("path,labels\n" + "".join(
            f"{i}.png,{labels}\n" for i, labels in enumerate(rows)))
    config = folder_config(data)
    dataset = tf_pipeline.open_dataset(config)
    return dataset_record.describe(config, dataset.info, dataset.fingerprints())

  dataset_record.write(workdir, record(["sky", "tree", "sky;tree", ""]))
  exchanged = record(["tree", "sky", "sky;tree", ""])  # same classes, files and counts
  with pytest.raises(dataset_record.DataChangedError) as error:
    dataset_record.check_resume(workdir, exchanged, step=1)
  assert str(error.value) == (
      f"the data of {data} changed since this run started in {workdir} (dataset.json): "
      "train split: files 2 relabelled in labels.csv (train/0.png, train/1.png); restore "
      "it, use a new --workdir, or pass --config.allow_data_change=True to resume on it")
