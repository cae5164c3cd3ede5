"""Where training numbers go: TensorBoard (clu), `metrics.jsonl`, and a progress line.

`metrics.jsonl` holds one JSON object per write, `{"step": N, "<name>": value, ...}`,
so scripts can read results without TensorBoard.
"""

import json
import os
import time
from typing import Any, Mapping, Optional

from absl import logging
from clu import metric_writers
from clu.metric_writers import interface


class JsonlWriter(interface.MetricWriter):
  """Appends scalars (and texts) as JSON lines; other summary kinds belong to TensorBoard."""

  def __init__(self, path: str):
    self._file = open(path, "a", encoding="utf-8")

  def _write(self, step: int, values: Mapping[str, Any]) -> None:
    self._file.write(json.dumps({"step": int(step), **values}) + "\n")
    self._file.flush()

  def write_scalars(self, step, scalars):
    self._write(step, {name: float(value) for name, value in scalars.items()})

  def write_texts(self, step, texts):
    self._write(step, {name: str(value) for name, value in texts.items()})

  def write_summaries(self, step, values, metadata=None):
    """Tensor summaries are TensorBoard-only."""

  def write_images(self, step, images):
    """Images are TensorBoard-only."""

  def write_videos(self, step, videos):
    """Videos are TensorBoard-only."""

  def write_audios(self, step, audios, *, sample_rate):
    """Audio is TensorBoard-only."""

  def write_histograms(self, step, arrays, num_buckets=None):
    """Histograms are TensorBoard-only."""

  def write_hparams(self, hparams):
    self._write(0, {"hparams": {k: str(v) for k, v in hparams.items()}})

  def flush(self):
    self._file.flush()

  def close(self):
    self._file.close()


def create_writer(workdir: str, *, is_main_process: bool) -> metric_writers.MetricWriter:
  """TensorBoard + metrics.jsonl + log on the main process; log-free no-op elsewhere."""
  if not is_main_process:
    return metric_writers.MultiWriter([])
  os.makedirs(workdir, exist_ok=True)
  return metric_writers.MultiWriter([
      metric_writers.create_default_writer(workdir, asynchronous=False),
      JsonlWriter(os.path.join(workdir, "metrics.jsonl")),
  ])


def format_duration(seconds: float) -> str:
  seconds = int(max(seconds, 0))
  hours, rest = divmod(seconds, 3600)
  minutes, seconds = divmod(rest, 60)
  return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{seconds:02d}s"


class Progress:
  """Steps/s, images/s/device and ETA measured between calls (compile time excluded)."""

  def __init__(self, *, total_steps: int, batch_size: int, num_devices: int):
    self.total_steps = total_steps
    self.batch_size = batch_size
    self.num_devices = num_devices
    self._last: Optional[tuple] = None

  def update(self, step: int) -> Optional[dict]:
    """Returns rates since the previous call (None on the first call) and logs a line."""
    now = time.perf_counter()
    last, self._last = self._last, (step, now)
    if last is None or step <= last[0]:
      return None
    steps_per_sec = (step - last[0]) / (now - last[1])
    img_per_sec = steps_per_sec * self.batch_size
    eta = (self.total_steps - step) / steps_per_sec
    logging.info("step %d/%d (%.1f%%) | %.2f steps/s | %.1f img/s/device | ETA %s",
                 step, self.total_steps, 100 * step / self.total_steps, steps_per_sec,
                 img_per_sec / self.num_devices, format_duration(eta))
    return {"steps_per_sec": steps_per_sec, "img_per_sec": img_per_sec,
            "img_per_sec_per_device": img_per_sec / self.num_devices}
