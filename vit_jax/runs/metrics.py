"""Where training numbers go: TensorBoard (clu), `metrics.jsonl`, and a progress line.

`metrics.jsonl` holds one JSON object per write, `{"step": N, "<name>": value, ...}`,
so scripts can read results without TensorBoard.
"""

import json
import os
import time
from typing import Any, Mapping, Optional

from clu import metric_writers
from clu.metric_writers import interface

from vit_jax.console import log


def supersede_rows_after(path: str, step: Optional[int]) -> None:
  """Moves rows newer than the resumed `step` (all rows for a fresh start, step None) to
  metrics.superseded.jsonl: after a kill, the killed run's steps past its last checkpoint
  are trained again, and metrics.jsonl must hold each step once. Nothing is deleted."""
  if not os.path.exists(path):
    return
  with open(path, encoding="utf-8") as f:
    lines = [line for line in f.read().splitlines() if line.strip()]
  keep, moved = [], []
  for line in lines:
    try:
      row_step = json.loads(line)["step"]
    except (ValueError, KeyError, TypeError):  # a line cut short by the kill
      row_step = None
    (keep if step is not None and row_step is not None and row_step <= step else moved
     ).append(line)
  if not moved:
    return
  superseded = os.path.join(os.path.dirname(path), "metrics.superseded.jsonl")
  with open(superseded, "a", encoding="utf-8") as f:
    f.write("".join(line + "\n" for line in moved))
  tmp = path + ".tmp"
  with open(tmp, "w", encoding="utf-8") as f:
    f.write("".join(line + "\n" for line in keep))
  os.replace(tmp, path)
  log.info("moved %d metrics.jsonl row(s) past step %d (from before the restart) to %s",
           len(moved), step or 0, superseded)


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


def create_writer(workdir: str, *, is_main_process: bool,
                  resume_step: Optional[int] = None) -> metric_writers.MetricWriter:
  """TensorBoard + metrics.jsonl + log on the main process; log-free no-op elsewhere.

  metrics.jsonl continues from `resume_step` (None: a fresh start): see
  supersede_rows_after."""
  if not is_main_process:
    return metric_writers.MultiWriter([])
  os.makedirs(workdir, exist_ok=True)
  path = os.path.join(workdir, "metrics.jsonl")
  supersede_rows_after(path, resume_step)
  return metric_writers.MultiWriter([
      metric_writers.create_default_writer(workdir, asynchronous=False),
      JsonlWriter(path),
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
    self._first: Optional[tuple] = None
    self._last: Optional[tuple] = None

  def update(self, step: int, loss: Optional[float] = None) -> Optional[dict]:
    """Returns rates since the previous call (None on the first call) and logs a line."""
    now = time.perf_counter()
    last, self._last = self._last, (step, now)
    self._first = self._first or self._last
    if last is None or step <= last[0]:
      return None
    steps_per_sec = (step - last[0]) / (now - last[1])
    img_per_sec = steps_per_sec * self.batch_size
    eta = (self.total_steps - step) / steps_per_sec
    loss_text = "" if loss is None else f" | loss {loss:.4f}"
    log.info("step %d/%d (%.1f%%)%s | %.2f steps/s | %.1f img/s/device | ETA %s",
             step, self.total_steps, 100 * step / self.total_steps, loss_text, steps_per_sec,
             img_per_sec / self.num_devices, format_duration(eta))
    return {"steps_per_sec": steps_per_sec, "img_per_sec": img_per_sec,
            "img_per_sec_per_device": img_per_sec / self.num_devices}

  def mean_img_per_sec(self) -> Optional[float]:
    """Images/s from the first step after compilation to the last update."""
    if self._first is None or self._last[0] <= self._first[0]:
      return None
    return (self._last[0] - self._first[0]) * self.batch_size / (self._last[1] - self._first[1])


def changed_keys(old: Mapping[str, Any], new: Mapping[str, Any], prefix: str = "") -> list:
  """Dotted names of the config entries that differ between two JSON config dicts."""
  changed = []
  for key in sorted(set(old) | set(new)):
    a, b = old.get(key), new.get(key)
    if isinstance(a, Mapping) and isinstance(b, Mapping):
      changed += changed_keys(a, b, f"{prefix}{key}.")
    elif a != b:
      changed.append(f"{prefix}{key}")
  return changed


def _eval_set_names(eval_metrics: Mapping[str, float]) -> list:
  """The named evaluation sets of eval/<name>/accuracy keys, when there are several."""
  names = [key.split("/")[1] for key in eval_metrics
           if key.startswith("eval/") and key.endswith("/accuracy") and key.count("/") == 2]
  return names if len(names) > 1 else []


def final_summary(*, workdir: str, steps: tuple, seconds: float, img_per_sec: Optional[float],
                  eval_metrics: Mapping[str, float], checkpoint_steps: list) -> str:
  """The lines a finished run ends with: the result and where everything was written."""
  start, total = steps
  rate = f", {img_per_sec:,.0f} img/s after compilation" if img_per_sec else ""
  trained = (f"trained steps {start + 1}-{total} of {total}" if start < total
             else f"already at step {total}")
  lines = [
      f"done: {trained} in {format_duration(seconds)}{rate}",
      f"  eval accuracy {eval_metrics['eval/accuracy']:.4f}, loss {eval_metrics['eval/loss']:.4f}"
      f" on {int(eval_metrics['eval/examples'])} examples",
      *[f"    {name}: accuracy {eval_metrics[f'eval/{name}/accuracy']:.4f} on "
        f"{int(eval_metrics[f'eval/{name}/examples'])} examples"
        for name in _eval_set_names(eval_metrics)],
      f"  params:      {os.path.join(workdir, 'params.npz')}",
      f"  metrics:     {os.path.join(workdir, 'metrics.jsonl')} (final: final_metrics.json)",
      f"  tensorboard: tensorboard --logdir={workdir}",
      f"  checkpoints: {os.path.join(workdir, 'checkpoints')} (steps "
      f"{', '.join(map(str, checkpoint_steps))})",
  ]
  return "\n".join(lines)
