"""metrics.jsonl, TensorBoard events and the progress line."""

import json
import os

from vit_jax.base import storage, workdir_files
from vit_jax.training.runs import metrics


def test_jsonl_and_tensorboard(tmp_path):
  writer = metrics.create_writer(str(tmp_path), is_main_process=True)
  writer.write_scalars(10, {"train/loss": 1.5, "train/lr": 0.1})
  writer.write_scalars(20, {"eval/accuracy": 0.75})
  writer.close()
  lines = [json.loads(l) for l in (tmp_path / "metrics.jsonl").read_text().splitlines()]
  assert lines == [{"step": 10, "train/loss": 1.5, "train/lr": 0.1},
                   {"step": 20, "eval/accuracy": 0.75}]
  assert any(name.startswith("events.out.tfevents") for name in os.listdir(tmp_path))


def test_rows_past_the_resumed_step_are_moved_aside(tmp_path):
  writer = metrics.create_writer(str(tmp_path), is_main_process=True)
  for step in (0, 10, 20, 30):
    writer.write_scalars(step, {"train/loss": float(step)})
  writer.close()
  with open(tmp_path / "metrics.jsonl", "a") as f:
    f.write('{"step": 40, "train/lo')  # cut short by a SIGKILL
  writer = metrics.create_writer(str(tmp_path), is_main_process=True, resume_step=20)
  writer.write_scalars(30, {"train/loss": -30.0})
  writer.close()
  rows = [json.loads(l) for l in (tmp_path / "metrics.jsonl").read_text().splitlines()]
  assert [(r["step"], r["train/loss"]) for r in rows] == [(0, 0.0), (10, 10.0), (20, 20.0),
                                                           (30, -30.0)]
  superseded = (tmp_path / "metrics.superseded.jsonl").read_text().splitlines()
  assert superseded == ['{"step": 30, "train/loss": 30.0}', '{"step": 40, "train/lo']
  # A fresh start (no checkpoint to resume from) supersedes every earlier row.
  metrics.create_writer(str(tmp_path), is_main_process=True).close()
  assert (tmp_path / "metrics.jsonl").read_text() == ""


def test_other_processes_write_nothing(tmp_path):
  writer = metrics.create_writer(str(tmp_path / "w"), is_main_process=False)
  writer.write_scalars(1, {"x": 1.0})
  writer.close()
  assert not (tmp_path / "w").exists()


def test_progress_rates_and_eta(monkeypatch):
  clock = iter([100.0, 110.0])
  monkeypatch.setattr(metrics.time, "perf_counter", lambda: next(clock))
  progress = metrics.Progress(total_steps=1000, batch_size=64, num_devices=2)
  assert progress.update(100) is None
  rates = progress.update(200)  # 100 steps in 10 s
  assert rates == {"steps_per_sec": 10.0, "img_per_sec": 640.0, "img_per_sec_per_device": 320.0}


def test_final_summary_names_the_result_and_every_output():
  summary = metrics.final_summary(
      workdir="/w", steps=(4, 10), seconds=75, img_per_sec=1234.4,
      eval_metrics={"eval/accuracy": 0.9, "eval/loss": 0.25, "eval/examples": 300},
      checkpoint_dir="/w/ckpt", checkpoint_steps=[8, 10])
  assert summary.splitlines()[:2] == [
      "done: trained steps 5-10 of 10 in 1m15s, 1,234 img/s after compilation",
      "  eval accuracy 0.9000, loss 0.2500 on 300 examples"]
  assert f"params:      /w/{workdir_files.PARAMS}" in summary
  assert (f"metrics:     /w/{workdir_files.METRICS} (final: {workdir_files.FINAL_METRICS})"
          in summary)
  assert summary.endswith("checkpoints: /w/ckpt (steps 8, 10)")
  spaced = metrics.final_summary(
      workdir="/path/my run", steps=(4, 10), seconds=75, img_per_sec=None,
      eval_metrics={"eval/accuracy": 0.9, "eval/loss": 0.25, "eval/examples": 300},
      checkpoint_dir="/w/ckpt", checkpoint_steps=[10])
  assert "tensorboard --logdir='/path/my run'\n" in spaced  # a command one can paste


def test_format_duration():
  assert metrics.format_duration(75) == "1m15s"
  assert metrics.format_duration(3 * 3600 + 120) == "3h02m"


def test_on_object_stores_each_write_is_one_small_object_merged_once(gcs, tmp_path):
  """No appends on gs://: a write uploads one row (its cost does not grow with the run), the
  reader sees the rows while the run goes, a killed run's extra rows move aside on resume,
  and the close leaves one metrics.jsonl. TensorBoard gets one event file per write."""
  from tensorboard.backend.event_processing import event_file_loader  # pylint: disable=import-outside-toplevel
  from tensorboard.compat.proto import event_pb2  # pylint: disable=import-outside-toplevel
  workdir = f"gs://{gcs.bucket}/metrics"
  writer = metrics.create_writer(workdir, is_main_process=True)
  for step in (0, 10, 20, 30):
    writer.write_scalars(step, {"train/loss": float(step)})
  folder = f"{workdir}/{workdir_files.METRIC_PARTS}"
  parts = [f"{folder}/{name}" for name in storage.listdir(folder)]
  assert [storage.read_text(part).count("\n") for part in parts] == [1, 1, 1, 1]
  assert [row["step"] for row in metrics.read_rows(workdir)] == [0, 10, 20, 30]
  assert not storage.exists(f"{workdir}/metrics.jsonl")

  # SIGKILLed here (no close); the rerun resumes from the checkpoint of step 20.
  writer = metrics.create_writer(workdir, is_main_process=True, resume_step=20)
  writer.write_scalars(30, {"train/loss": -30.0})
  writer.close()
  rows = [json.loads(l) for l in storage.read_text(f"{workdir}/metrics.jsonl").splitlines()]
  assert [(r["step"], r["train/loss"]) for r in rows] == [(0, 0.0), (10, 10.0), (20, 20.0),
                                                           (30, -30.0)]
  assert metrics.read_rows(workdir) == rows
  assert storage.read_text(f"{workdir}/metrics.superseded.jsonl").splitlines() == [
      '{"step": 30, "train/loss": 30.0}']
  assert storage.listdir(f"{workdir}/{workdir_files.METRIC_PARTS}") == []

  events = [name for name in storage.listdir(workdir) if name.startswith("events.out.tfevents")]
  assert len(events) == 5
  scalars = []
  for name in events:
    (tmp_path / name).write_bytes(storage.read_bytes(f"{workdir}/{name}"))
    for record in event_file_loader.RawEventFileLoader(str(tmp_path / name)).Load():
      event = event_pb2.Event.FromString(record)
      scalars += [(event.step, value.tag, value.simple_value) for value in event.summary.value]
  assert sorted(scalars) == [(0, "train/loss", 0.0), (10, "train/loss", 10.0),
                             (20, "train/loss", 20.0), (30, "train/loss", -30.0),
                             (30, "train/loss", 30.0)]
