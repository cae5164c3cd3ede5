"""Both run writers answer clu's whole MetricWriter interface and keep only what the train
loop writes: media calls leave no line in metrics.jsonl and no event file."""

import numpy as np

from vit_jax.training.runs import event_files, metrics


def write_every_media_kind(writer):
  image = np.zeros((1, 4, 4, 3), np.float32)
  writer.write_images(1, {"image": image})
  writer.write_videos(1, {"video": image[None]})
  writer.write_audios(1, {"audio": np.zeros((1, 8, 1), np.float32)}, sample_rate=8000)
  writer.write_histograms(1, {"weights": np.arange(4.0)})
  writer.write_summaries(1, {"tensor": np.arange(4.0)})


def test_jsonl_writer_keeps_scalars_and_drops_media(tmp_path):
  writer = metrics.JsonlWriter(str(tmp_path))
  write_every_media_kind(writer)
  writer.write_scalars(2, {"loss": 0.5})
  writer.close()
  lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
  assert len(lines) == 1 and '"loss": 0.5' in lines[0] and '"step": 2' in lines[0]


def test_event_writer_uploads_nothing_for_media(tmp_path):
  writer = event_files.SegmentedEventWriter(str(tmp_path))
  write_every_media_kind(writer)
  assert not list(tmp_path.iterdir())
  writer.write_scalars(2, {"loss": 0.5})
  assert len([p for p in tmp_path.iterdir() if "tfevents" in p.name]) == 1
