"""The files a run leaves in its workdir besides checkpoints and metrics: config.json,
parameters.txt, and at the end params.npz and final_metrics.json (which also tell a rerun
that the run has finished), each written whole and atomically (vit_jax/base/storage.py), so a
kill never leaves a truncated file that a rerun would then fail to read."""

import dataclasses
import json
from typing import Any, Dict, Mapping, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from clu import parameter_overview
from flax import traverse_util

from vit_jax.base import storage, workdir_files
from vit_jax.base.console import log
from vit_jax.checkpoints import npz


def finished_results(workdir: str, latest_step: Optional[int],
                     total_steps: int) -> Optional[Dict[str, float]]:
  """The final metrics of a run that already completed in `workdir`, else None."""
  final = storage.join(workdir, workdir_files.FINAL_METRICS)
  if (latest_step is None or latest_step < total_steps or not storage.exists(final)
      or not storage.exists(storage.join(workdir, workdir_files.PARAMS))):
    return None
  return json.loads(storage.read_text(final))


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


def changed_since_start(config, workdir: str) -> list:
  """Dotted names of the config entries that differ from the run's config.json (none when
  it has none)."""
  path = storage.join(workdir, workdir_files.CONFIG)
  if not storage.exists(path):
    return []
  return changed_keys(json.loads(storage.read_text(path)),
                      json.loads(config.to_json_best_effort(indent=2, sort_keys=True)))


def save_config(config, workdir: str, resume_step: Optional[int]) -> None:
  """config.json at the start; a resumed run with changed settings keeps it and writes
  config.resumed-<step>.json next to it, naming the changes."""
  text = config.to_json_best_effort(indent=2, sort_keys=True)
  path = storage.join(workdir, workdir_files.CONFIG)
  if resume_step is not None and storage.exists(path):
    changed = changed_since_start(config, workdir)
    if not changed:
      return
    path = storage.join(workdir, workdir_files.resumed_config(resume_step))
    log.warning("resuming with changed settings (%s); the original %s is kept, this run's "
                "config is in %s", ", ".join(changed), workdir_files.CONFIG, path)
  storage.write_atomic(path, text)


@jax.jit
def _means_and_stds(params):
  """Each array's (mean, std), all in one program: eagerly, every new shape (and sharding)
  compiles two programs of its own, hundreds for a ViT-B before its first step."""
  return jax.tree.map(lambda x: (jnp.mean(x), jnp.std(x)), params)


def write_parameter_table(params, workdir: str,
                          columns: Optional[Mapping[str, Mapping[str, str]]] = None) -> int:
  """The parameter table goes to a file (70 lines are too many for the console); `columns`
  adds {column: {parameter path: value}} (learning-rate multiplier, whether it trains)."""
  columns = columns or {}
  row_type = dataclasses.make_dataclass(
      "ParameterRow", ["name", "shape", "size", "mean", "std", *columns])
  stats = traverse_util.flatten_dict(jax.device_get(_means_and_stds(params)), sep="/")
  rows = [row_type(name, value.shape, int(np.prod(value.shape)), float(stats[name][0]),
                   float(stats[name][1]), *(column[name] for column in columns.values()))
          for name, value in traverse_util.flatten_dict(params, sep="/").items()]
  storage.write_atomic(storage.join(workdir, workdir_files.PARAMETER_TABLE),
                  parameter_overview.make_table(rows) + "\n")
  return sum(int(np.prod(p.shape)) for p in jax.tree.leaves(params))


def write_final(params: Any, eval_metrics: Dict[str, Any], workdir: str,
                class_names: Optional[Sequence[str]] = None, multi_label: bool = False,
                max_patches: Optional[int] = None) -> None:
  """params.npz (released layout, with the head's class names, multi-label flag and NaFlex
  patch budget when given) and final_metrics.json, each atomic, written last."""
  npz.save_npz(params, storage.join(workdir, workdir_files.PARAMS), class_names=class_names,
               multi_label=multi_label, max_patches=max_patches)
  storage.write_atomic(storage.join(workdir, workdir_files.FINAL_METRICS),
                       json.dumps(eval_metrics, indent=2))
