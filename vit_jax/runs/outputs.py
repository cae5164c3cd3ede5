"""The files a run leaves in its workdir besides checkpoints and metrics: config.json,
parameters.txt, and at the end params.npz and final_metrics.json (which also tell a rerun
that the run has finished). Each is written whole and atomically (runs/fs.py), so a kill
never leaves a truncated file that a rerun would then fail to read."""

import json
from typing import Any, Dict, Optional, Sequence

import jax
import numpy as np
from clu import parameter_overview

from vit_jax.checkpoints import npz
from vit_jax.runs import fs, metrics
from vit_jax.console import log

PARAMS = "params.npz"
FINAL_METRICS = "final_metrics.json"
CONFIG = "config.json"
PARAMETER_TABLE = "parameters.txt"


def finished_results(workdir: str, latest_step: Optional[int],
                     total_steps: int) -> Optional[Dict[str, float]]:
  """The final metrics of a run that already completed in `workdir`, else None."""
  final = fs.join(workdir, FINAL_METRICS)
  if (latest_step is None or latest_step < total_steps or not fs.exists(final)
      or not fs.exists(fs.join(workdir, PARAMS))):
    return None
  return json.loads(fs.read_text(final))


def save_config(config, workdir: str, resume_step: Optional[int]) -> None:
  """config.json at the start; a resumed run with changed settings keeps it and writes
  config.resumed-<step>.json next to it, naming the changes."""
  text = config.to_json_best_effort(indent=2, sort_keys=True)
  path = fs.join(workdir, CONFIG)
  if resume_step is not None and fs.exists(path):
    changed = metrics.changed_keys(json.loads(fs.read_text(path)), json.loads(text))
    if not changed:
      return
    path = fs.join(workdir, f"config.resumed-{resume_step}.json")
    log.warning("resuming with changed settings (%s); the original config.json is kept, "
                "this run's config is in %s", ", ".join(changed), path)
  fs.write_atomic(path, text)


def write_parameter_table(params, workdir: str) -> int:
  """The parameter table goes to a file (70 lines are too many for the console)."""
  fs.write_atomic(fs.join(workdir, PARAMETER_TABLE),
                  parameter_overview.get_parameter_overview(params) + "\n")
  return sum(int(np.prod(p.shape)) for p in jax.tree.leaves(params))


def write_final(params: Any, eval_metrics: Dict[str, float], workdir: str,
                class_names: Optional[Sequence[str]] = None) -> None:
  """params.npz (released layout, with the head's class names when given) and
  final_metrics.json, each atomic, written last."""
  npz.save_npz(params, fs.join(workdir, PARAMS), class_names=class_names)
  fs.write_atomic(fs.join(workdir, FINAL_METRICS), json.dumps(eval_metrics, indent=2))
