"""TFDS datasets: in memory or streamed, missing, unknown, downloads (offline, failing,
needing files by hand)."""

import re
import time

import pytest
import requests
import tensorflow_datasets as tfds

from helpers import make_config, train
from vit_jax.data import splits
from vit_jax.data.sources import tfds_builder
from vit_jax.data.tf_stack import tf_pipeline


def test_tfds_mock_is_indexed():
  with tfds.testing.mock_data(num_examples=12, policy=tfds.testing.MockPolicy.USE_CODE):
    dataset = tf_pipeline.open_dataset(make_config("cifar10"))
  assert isinstance(dataset.train, splits.IndexedSplit) and dataset.train.kind == "encoded"
  assert dataset.info.num_classes == 10
  assert dataset.info.num_train == 12
  batch = train(dataset, num_steps=1, batch_size=4)[0]
  assert batch["image"].shape == (4, 16, 16, 3)


def test_tfds_missing_fails_fast(tmp_path):
  config = make_config("cifar10")
  config.tfds_data_dir = str(tmp_path)
  start = time.time()
  with pytest.raises(FileNotFoundError, match="not prepared.*tfds build cifar10:3.0.2 --data_dir"):
    tf_pipeline.open_dataset(config)
  assert time.time() - start < 5


def tfds_download_config(tmp_path, name="cifar10"):
  config = make_config(name)
  config.tfds_data_dir, config.tfds_download = str(tmp_path), True
  return config


def test_tfds_download_offline_fails_fast(tmp_path, monkeypatch):
  """No network (every HTTP request fails, as on this offline machine): one line in
  seconds, before tfds's download and its ~3.5 minutes of retries."""
  def offline(*args, **kwargs):
    raise requests.ConnectionError("Failed to resolve host")
  monkeypatch.setattr(requests.Session, "send", offline)
  monkeypatch.setattr(tfds.core.DatasetBuilder, "download_and_prepare",
                      lambda *args, **kwargs: pytest.fail("downloads although offline"))
  start = time.time()
  with pytest.raises(FileNotFoundError, match=r"^cannot download TFDS dataset cifar10: no "
                     r"network connection to https://www\.cs\.toronto\.edu/ \(ConnectionError\)"
                     r", .*tfds build cifar10:3.0.2 --data_dir=DIR.*config\.tfds_data_dir"):
    tf_pipeline.open_dataset(tfds_download_config(tmp_path))
  assert time.time() - start < 5


def test_tfds_download_with_network_downloads(tmp_path, monkeypatch):
  """The probe lets a reachable network through to the real download; its failure is
  one line."""
  def answer(*args, **kwargs):
    response = requests.Response()
    response.status_code = 403  # any answer means the network is there
    return response
  calls = []
  def download(builder, download_config):
    calls.append((builder.name, download_config.manual_dir))
    raise requests.ConnectionError("Connection reset by peer\n(traceback)")
  monkeypatch.setattr(requests.Session, "send", answer)
  monkeypatch.setattr(tfds.core.DatasetBuilder, "download_and_prepare", download)
  config = tfds_download_config(tmp_path)
  config.tfds_manual_dir = str(tmp_path / "manual")
  with pytest.raises(FileNotFoundError, match=r"^downloading TFDS dataset cifar10 failed: "
                     r"Connection reset by peer \(traceback\); check the network and rerun"):
    tf_pipeline.open_dataset(config)
  assert calls == [("cifar10", str(tmp_path / "manual"))]


def test_tfds_manual_download_names_the_manual_dir(tmp_path):
  """imagenet2012 cannot be downloaded by TFDS: say so, with its instructions and where
  the files go, instead of suggesting tfds_download=True alone."""
  config = tfds_download_config(tmp_path, "imagenet2012")
  config.tfds_download = False
  manual = re.escape(str(tmp_path / "downloads" / "manual"))
  with pytest.raises(FileNotFoundError, match=(
      "and TFDS cannot download it by itself: manual_dir should contain two files: "
      f"ILSVRC2012_img_train.tar .* config.tfds_manual_dir \\(default {manual}\\), then set "
      "config.tfds_download=True")):
    tf_pipeline.open_dataset(config)
  config.tfds_download = True
  with pytest.raises(FileNotFoundError, match=(
      "^TFDS dataset imagenet2012 needs files downloaded by hand: manual_dir should contain "
      f".* Put them in {manual} \\(or set config.tfds_manual_dir")):
    tf_pipeline.open_dataset(config)


@pytest.mark.parametrize("limit", [tfds_builder.IN_MEMORY_LIMIT_BYTES, 0], ids=["memory", "stream"])
def test_tfds_prepared(tmp_path, monkeypatch, limit):
  """A real prepared dataset (tfds's offline dummy_mnist: 20 + 20 grayscale PNGs)."""
  tfds.testing.DummyMnist(data_dir=str(tmp_path)).download_and_prepare()
  monkeypatch.setattr(tfds_builder, "IN_MEMORY_LIMIT_BYTES", limit)
  config = make_config("dummy_mnist")
  config.tfds_data_dir, config.train_split = str(tmp_path), "train[:18]"
  dataset = tf_pipeline.open_dataset(config)
  assert isinstance(dataset.train, splits.StreamingSplit) == (limit == 0)
  assert (dataset.info.num_train, dataset.info.num_eval) == (18, 20)
  batches = train(dataset, process_count=2, num_steps=3, batch_size=4)
  assert [b["image"].shape for b in batches] == [(2, 16, 16, 3)] * 3
  evaluation = [list(dataset.eval_batches(batch_size=6, process_index=p, process_count=2))
                for p in range(2)]
  assert len(evaluation[0]) == len(evaluation[1])
  assert sum(b["mask"].sum() for part in evaluation for b in part) == 20
  train_split = dataset.eval_batches(batch_size=6, process_index=0, process_count=1,
                                     split="train")
  assert sum(b["mask"].sum() for b in train_split) == 18
