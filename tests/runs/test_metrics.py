"""metrics.jsonl, TensorBoard events and the progress line."""

import json
import os

from vit_jax.runs import metrics


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


def test_format_duration():
  assert metrics.format_duration(75) == "1m15s"
  assert metrics.format_duration(3 * 3600 + 120) == "3h02m"
