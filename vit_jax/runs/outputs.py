"""The files a run leaves in its workdir besides checkpoints and metrics: config.json,
parameters.txt, and at the end params.npz and final_metrics.json (which also tell a rerun
that the run has finished)."""

import json
import os
from typing import Any, Dict, Optional, Sequence

import jax
import numpy as np
from clu import parameter_overview

from vit_jax.checkpoints import npz
from vit_jax.runs import metrics
from vit_jax.console import log

PARAMS = "params.npz"
FINAL_METRICS = "final_metrics.json"


def finished_results(workdir: str, latest_step: Optional[int],
                     total_steps: int) -> Optional[Dict[str, float]]:
  """The final metrics of a run that already completed in `workdir`, else None."""
  final = os.path.join(workdir, FINAL_METRICS)
  if (latest_step is None or latest_step < total_steps or not os.path.exists(final)
      or not os.path.exists(os.path.join(workdir, PARAMS))):
    return None
  with open(final, encoding="utf-8") as f:
    return json.load(f)


def save_config(config, workdir: str, resume_step: Optional[int]) -> None:
  """config.json at the start; a resumed run with changed settings keeps it and writes
  config.resumed-<step>.json next to it, naming the changes."""
  text = config.to_json_best_effort(indent=2, sort_keys=True)
  path = os.path.join(workdir, "config.json")
  if resume_step is not None and os.path.exists(path):
    with open(path, encoding="utf-8") as f:
      saved = json.load(f)
    changed = metrics.changed_keys(saved, json.loads(text))
    if not changed:
      return
    path = os.path.join(workdir, f"config.resumed-{resume_step}.json")
    log.warning("resuming with changed settings (%s); the original config.json is kept, "
                "this run's config is in %s", ", ".join(changed), path)
  with open(path, "w", encoding="utf-8") as f:
    f.write(text)


def write_parameter_table(params, workdir: str) -> int:
  """The parameter table goes to a file (70 lines are too many for the console)."""
  with open(os.path.join(workdir, "parameters.txt"), "w", encoding="utf-8") as f:
    f.write(parameter_overview.get_parameter_overview(params) + "\n")
  return sum(int(np.prod(p.shape)) for p in jax.tree.leaves(params))


def write_final(params: Any, eval_metrics: Dict[str, float], workdir: str,
                class_names: Optional[Sequence[str]] = None) -> None:
  """params.npz (released layout, atomic, with the head's class names when given) and
  final_metrics.json, written last."""
  npz.save_npz(params, os.path.join(workdir, PARAMS), class_names=class_names)
  with open(os.path.join(workdir, FINAL_METRICS), "w", encoding="utf-8") as f:
    json.dump(eval_metrics, f, indent=2)
