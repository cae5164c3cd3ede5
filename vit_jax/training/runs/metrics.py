"""Where training numbers go: TensorBoard (clu, or without TensorFlow tensorboard's own
event writer), `metrics.jsonl`, and a progress line.

`metrics.jsonl` holds one JSON object per write, `{"step": N, "<name>": value, ...}`,
so scripts can read results without TensorBoard; `read_rows(workdir)` reads it (local or
object store, finished or running).
"""

import json
import shlex
import time
from typing import Any, Dict, List, Mapping, Optional, Tuple

from vit_jax.base import storage, workdir_files
from vit_jax.base.console import log
from vit_jax.training.runs import event_files
from vit_jax.training.runs.scalar_writer import Fanout, ScalarWriter



def _step_of(line: str) -> Optional[int]:
  try:
    return int(json.loads(line)["step"])
  except (ValueError, KeyError, TypeError):  # a line cut short by a kill
    return None


def _lines(path: str) -> List[str]:
  if not storage.exists(path):
    return []
  return [line for line in storage.read_text(path).splitlines() if line.strip()]


def _part_paths(workdir: str) -> List[str]:
  parts = storage.join(workdir, workdir_files.METRIC_PARTS)
  return [storage.join(parts, name) for name in storage.listdir(parts)]


def _all_lines(workdir: str) -> Tuple[List[str], List[str]]:
  """(every row line in step order, the part objects they came from). Parts at or below
  the last step of metrics.jsonl were already merged into it (by a close that was
  interrupted before deleting them) and are skipped."""
  lines = _lines(storage.join(workdir, workdir_files.METRICS))
  merged_up_to = max((s for s in map(_step_of, lines) if s is not None), default=-1)
  parts = _part_paths(workdir) if storage.is_url(workdir) else []
  for part in parts:  # names sort by step, then by write order
    lines += [line for line in _lines(part) if (_step_of(line) or 0) > merged_up_to]
  return lines, parts


def read_rows(workdir: str) -> List[Dict[str, Any]]:
  """The rows of a run's metrics.jsonl, also while it runs on an object store (where the
  newest rows are still separate objects): the one reader every consumer uses."""
  return [json.loads(line) for line in _all_lines(workdir)[0] if _step_of(line) is not None]


def _rewrite(workdir: str, lines: List[str], parts: List[str]) -> None:
  storage.write_atomic(storage.join(workdir, workdir_files.METRICS),
                       "".join(line + "\n" for line in lines))
  for part in parts:  # after the merged file is complete: a kill in between loses nothing
    storage.remove(part)


def supersede_rows_after(workdir: str, step: Optional[int]) -> None:
  """Moves rows newer than the resumed `step` (all rows for a fresh start, step None) to
  metrics.superseded.jsonl: after a kill, the killed run's steps past its last checkpoint
  are trained again, and metrics.jsonl must hold each step once. Nothing is deleted."""
  lines, parts = _all_lines(workdir)
  keep, moved = [], []
  for line in lines:
    row_step = _step_of(line)
    (keep if step is not None and row_step is not None and row_step <= step else moved
     ).append(line)
  if not moved and not parts:
    return
  if moved:
    superseded = storage.join(workdir, workdir_files.SUPERSEDED_METRICS)
    storage.write_atomic(superseded, "".join(line + "\n" for line in _lines(superseded) + moved))
    log.info("moved %d metrics.jsonl row(s) past step %d (from before the restart) to %s",
             len(moved), step or 0, superseded)
  _rewrite(workdir, keep, parts)


class JsonlWriter(ScalarWriter):
  """Scalars (and texts) as JSON lines; other summary kinds belong to TensorBoard.

  A local metrics.jsonl is appended to. Objects cannot be appended to, and uploading the
  whole history at every write would cost more with every step, so on object stores each
  write is one small object under metrics.parts/, merged into metrics.jsonl when the
  writer closes (and on the next start, for a run that was killed)."""

  def __init__(self, workdir: str):
    self._workdir = workdir
    self._file = (None if storage.is_url(workdir)
                  else storage.open_append(storage.join(workdir, workdir_files.METRICS)))
    self._sequence = 0

  def _write(self, step: int, values: Mapping[str, Any]) -> None:
    line = json.dumps({"step": int(step), **values}) + "\n"
    if self._file is not None:
      self._file.write(line)
      self._file.flush()
      return
    self._sequence += 1
    storage.write_atomic(storage.join(self._workdir, workdir_files.METRIC_PARTS,
                            f"{int(step):010d}-{self._sequence:06d}.jsonl"), line)
  def write_scalars(self, step, scalars):
    self._write(step, {name: float(value) for name, value in scalars.items()})

  def write_texts(self, step, texts):
    self._write(step, {name: str(value) for name, value in texts.items()})

  def write_hparams(self, hparams):
    self._write(0, {"hparams": {k: str(v) for k, v in hparams.items()}})

  def flush(self):
    if self._file is not None:
      self._file.flush()

  def close(self):
    if self._file is not None:
      self._file.close()
    elif self._sequence:
      _rewrite(self._workdir, *_all_lines(self._workdir))


def create_writer(workdir: str, *, is_main_process: bool, resume_step: Optional[int] = None,
                  tensorflow: bool = True):
  """TensorBoard + metrics.jsonl + log on the main process; log-free no-op elsewhere.

  metrics.jsonl continues from `resume_step` (None: a fresh start): see
  supersede_rows_after. tensorflow=False writes the TensorBoard scalars without
  TensorFlow or clu's writers (the Grain loader's runs)."""
  if not is_main_process:
    return Fanout([])
  storage.makedirs(workdir)
  supersede_rows_after(workdir, resume_step)
  if storage.is_url(workdir):
    tensorboard = event_files.SegmentedEventWriter(workdir)
  elif not tensorflow:
    tensorboard = event_files.LocalEventWriter(workdir)
  else:
    from clu import metric_writers  # pylint: disable=import-outside-toplevel (TensorFlow)
    tensorboard = metric_writers.create_default_writer(workdir, asynchronous=False)
  return Fanout([tensorboard, JsonlWriter(workdir)])


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


def _eval_set_names(eval_metrics: Mapping[str, float]) -> list:
  """The named evaluation sets of eval/<name>/accuracy keys, when there are several."""
  names = [key.split("/")[1] for key in eval_metrics
           if key.startswith("eval/") and key.endswith("/accuracy") and key.count("/") == 2]
  return names if len(names) > 1 else []


def final_summary(*, workdir: str, steps: tuple, seconds: float, img_per_sec: Optional[float],
                  eval_metrics: Mapping[str, float], checkpoint_dir: str,
                  checkpoint_steps: list) -> str:
  """The lines a finished run ends with: the result and where everything was written."""
  start, total = steps
  rate = f", {img_per_sec:,.0f} img/s after compilation" if img_per_sec else ""
  trained = (f"trained steps {start + 1}-{total} of {total}" if start < total
             else f"already at step {total}")
  lines = [
      f"done: {trained} in {format_duration(seconds)}{rate}",
      f"  eval accuracy {eval_metrics['eval/accuracy']:.4f}, loss {eval_metrics['eval/loss']:.4f}"
      f" on {int(eval_metrics['eval/examples'])} examples",
      *([f"  eval mAP {eval_metrics['eval/map']:.4f}, F1 micro "
         f"{eval_metrics['eval/f1_micro']:.4f}, macro {eval_metrics['eval/f1_macro']:.4f}"]
        if "eval/map" in eval_metrics else []),
      *[f"    {name}: accuracy {eval_metrics[f'eval/{name}/accuracy']:.4f} on "
        f"{int(eval_metrics[f'eval/{name}/examples'])} examples"
        for name in _eval_set_names(eval_metrics)],
      f"  params:      {storage.join(workdir, workdir_files.PARAMS)}",
      f"  metrics:     {storage.join(workdir, workdir_files.METRICS)} "
      f"(final: {workdir_files.FINAL_METRICS})",
      f"  tensorboard: tensorboard --logdir={shlex.quote(workdir)}",
      f"  checkpoints: {checkpoint_dir} (steps "
      f"{', '.join(map(str, checkpoint_steps))})",
  ]
  return "\n".join(lines)
