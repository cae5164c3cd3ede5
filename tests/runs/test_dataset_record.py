"""dataset.json: a resumed run trains on the classes it started with."""

import json
import os

import pytest

from helpers import demo, sigterm_at_step, write_image
from vit_jax import read_class_names, train
from vit_jax.data import device_batches
from vit_jax.runs import dataset_record


def folder_config(root):
  config = demo.get_config(str(root))
  config.update(dict(total_steps=2, batch=4, batch_eval=4, progress_every=1, eval_every=2,
                     checkpoint_every=1, warmup_steps=1))
  config.model.update(dict(hidden_size=16, mlp_dim=32, num_heads=2, num_layers=1))
  config.lock()
  return config


def write_folder(root, classes):
  for split in ("train", "test"):
    for name in classes:
      for i in range(2):
        write_image(root / split / name / f"{i}.png", size=(20, 20))


def test_a_renamed_class_folder_is_refused_on_resume(tmp_path, monkeypatch):
  data, workdir = tmp_path / "pets", str(tmp_path / "run")
  write_folder(data, ["cat", "dog"])
  with monkeypatch.context() as patch:  # preempted after step 1: every run is one program
    patch.setattr(device_batches, "prefetch_to_device", sigterm_at_step(1))
    assert train.train_and_evaluate(folder_config(data), workdir)["preempted_at_step"] == 1
  record = json.loads((tmp_path / "run" / "dataset.json").read_text())
  assert record == {"source": str(data), "train_split": None, "eval_split": None,
                    "num_train": 4, "num_eval": 4, "num_classes": 2,
                    "class_names": ["cat", "dog"], "multi_label": False,
                    "train_class_counts": [2, 2]}

  for split in ("train", "test"):  # labels 0 and 1 would swap
    os.rename(data / split / "cat", data / split / "zz_cat")
  before = sorted(os.listdir(workdir))
  with pytest.raises(dataset_record.ClassesChangedError) as error:
    train.train_and_evaluate(folder_config(data), workdir)
  message = str(error.value)
  assert "\n" not in message
  assert (f"the classes of {data} changed since this run started in {workdir} (dataset.json): "
          "removed 'cat'; added 'zz_cat'; label 0 was 'cat', now 'dog'; label 1 was 'dog', "
          "now 'zz_cat'; resuming would train on other labels") in message
  assert sorted(os.listdir(workdir)) == before and "run.lock" not in before

  for split in ("train", "test"):  # restored, plus images added: resumes, with a warning
    os.rename(data / split / "zz_cat", data / split / "cat")
  write_image(data / "train" / "cat" / "new.png", size=(20, 20))
  result = train.train_and_evaluate(folder_config(data), workdir)
  assert result["eval/examples"] == 4
  assert read_class_names(os.path.join(workdir, "params.npz")) == ["cat", "dog"]


def test_describe_change_counts_and_truncates():
  old = [f"c{i}" for i in range(10)]
  assert dataset_record.describe_change(old, old + ["new"]) == "added 'new'; 10 -> 11 classes"
  text = dataset_record.describe_change(old, old[1:])
  assert text.startswith("removed 'c0'; label 0 was 'c0', now 'c1';") and "(+5 more)" in text
