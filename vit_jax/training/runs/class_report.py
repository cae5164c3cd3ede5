"""The per-class results of each evaluation in the workdir: per_class_metrics.json (the
latest evaluation's per-class numbers of every set, with the confusion counts), the
confusion matrix of the primary set as confusion_matrix.png and as a TensorBoard image
at every evaluation, and the worst classes by name for final_metrics.json.

Reports are keyed like the metrics: 'eval/<set>' for every set, and 'eval' (or
'eval_raw') for the primary one (the same report object, written once).
"""

import json
from typing import Dict, Mapping

from vit_jax.base import storage, workdir_files
from vit_jax.training.runs import confusion_plot
from vit_jax.training.scores.per_class import ClassReport

PRIMARY = "eval"  # the reports key of the primary set's report on the evaluated params


def _to_json(step: int, reports: Mapping[str, ClassReport]) -> str:
  named = {key: report for key, report in reports.items() if key.count("/")}
  first = next(iter(reports.values()))
  return json.dumps({"step": int(step), "class_names": first.class_names,
                     "sets": {key: report.to_json() for key, report in named.items()}})


def record(workdir: str, writer, step: int, reports: Mapping[str, ClassReport]) -> None:
  """Writes this evaluation's per-class results (main process only; nothing if none)."""
  if not reports:
    return
  storage.write_atomic(storage.join(workdir, workdir_files.PER_CLASS), _to_json(step, reports))
  primary = reports.get(PRIMARY)
  if primary is None or primary.confusion is None:
    return
  title = next(key for key, report in reports.items() if report is primary and key != PRIMARY)
  rgb = confusion_plot.draw(primary.confusion, primary.class_names, f"{title}, step {step}")
  storage.write_atomic(storage.join(workdir, workdir_files.CONFUSION_PNG),
                       confusion_plot.png_bytes(rgb))
  writer.write_images(step, {f"{PRIMARY}/confusion_matrix": rgb[None]})


def final_entries(reports: Mapping[str, ClassReport]) -> Dict[str, list]:
  """{'eval/worst_classes': [{class, name, <per-class values>}, ...]} of the primary set
  (empty without per-class results)."""
  primary = reports.get(PRIMARY)
  return {} if primary is None else {f"{PRIMARY}/worst_classes": primary.worst()}
