"""The files a run leaves in its workdir besides checkpoints and metrics: config.json,
parameters.txt, and at the end params.npz and final_metrics.json (which also tell a rerun
that the run has finished), each written whole and atomically (runs/fs.py), so a kill never
leaves a truncated file that a rerun would then fail to read; and the no-clobber rule of
every command that writes a folder or a file the user names (convert, visualize --out,
fewshot --json, vtab, export).

No clobbering: a writer creates a new folder, or writes into an empty one or one that holds
its own marker (MARKER, {"written_by": "vit_jax.<kind>"}) from an earlier run of the same
command; anything else (a training workdir, someone's model folder, another command's
output) is refused in one line unless the user passes --overwrite. A destination file is
written if absent, or over a JSON file stamped with the same "written_by", else refused
the same way. A path below an existing file is refused in one line, not as [Errno 17].
"""

import contextlib
import dataclasses
import fcntl
import json
import os
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from clu import parameter_overview
from flax import traverse_util

from vit_jax import errors
from vit_jax.checkpoints import npz
from vit_jax.runs import fs
from vit_jax.console import log

PARAMS = "params.npz"
MARKER = ".vit_jax-output.json"
OVERWRITE_HELP = ("Write into an existing folder, or over an existing file, that this "
                  "command did not create (refused by default: nothing is clobbered).")
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
  path = fs.join(workdir, CONFIG)
  if not fs.exists(path):
    return []
  return changed_keys(json.loads(fs.read_text(path)),
                      json.loads(config.to_json_best_effort(indent=2, sort_keys=True)))


def save_config(config, workdir: str, resume_step: Optional[int]) -> None:
  """config.json at the start; a resumed run with changed settings keeps it and writes
  config.resumed-<step>.json next to it, naming the changes."""
  text = config.to_json_best_effort(indent=2, sort_keys=True)
  path = fs.join(workdir, CONFIG)
  if resume_step is not None and fs.exists(path):
    changed = changed_since_start(config, workdir)
    if not changed:
      return
    path = fs.join(workdir, f"config.resumed-{resume_step}.json")
    log.warning("resuming with changed settings (%s); the original %s is kept, this run's "
                "config is in %s", ", ".join(changed), CONFIG, path)
  fs.write_atomic(path, text)


def write_parameter_table(params, workdir: str,
                          columns: Optional[Mapping[str, Mapping[str, str]]] = None) -> int:
  """The parameter table goes to a file (70 lines are too many for the console); `columns`
  adds {column: {parameter path: value}} (learning-rate multiplier, whether it trains)."""
  columns = columns or {}
  row_type = dataclasses.make_dataclass(
      "ParameterRow", ["name", "shape", "size", "mean", "std", *columns])
  rows = [row_type(name, value.shape, int(np.prod(value.shape)), float(jnp.mean(value)),
                   float(jnp.std(value)), *(column[name] for column in columns.values()))
          for name, value in traverse_util.flatten_dict(params, sep="/").items()]
  fs.write_atomic(fs.join(workdir, PARAMETER_TABLE), parameter_overview.make_table(rows) + "\n")
  return sum(int(np.prod(p.shape)) for p in jax.tree.leaves(params))


def write_final(params: Any, eval_metrics: Dict[str, Any], workdir: str,
                class_names: Optional[Sequence[str]] = None, multi_label: bool = False) -> None:
  """params.npz (released layout, with the head's class names and multi-label flag when
  given) and final_metrics.json, each atomic, written last."""
  npz.save_npz(params, fs.join(workdir, PARAMS), class_names=class_names,
               multi_label=multi_label)
  fs.write_atomic(fs.join(workdir, FINAL_METRICS), json.dumps(eval_metrics, indent=2))


class OutputExistsError(errors.InvalidInput):
  """A destination that holds something this command did not write; one line naming the
  path, what is there and --overwrite."""


class OutputBusyError(errors.InvalidInput):
  """A destination that another process is writing right now."""


@contextlib.contextmanager
def sole_writer(path: str, kind: str) -> Iterator[None]:
  """Holds the local `path` for this process while it writes it (the whole command: a
  second one fails at once, before its slow work), or raises OutputBusyError. Without it
  two commands writing one destination both end well and both say they wrote it, while
  one replaced the other's files (or mixed them). An flock on `.NAME.lock` beside it: the
  kernel releases it when its holder dies, so a SIGKILLed writer never blocks the next."""
  if fs.is_url(path):  # object stores have no locks; each file there is still atomic
    yield
    return
  _check_parents(path)
  path = os.path.abspath(path)
  lock = os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.lock")
  os.makedirs(os.path.dirname(lock), exist_ok=True)
  while True:
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    try:
      fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
      holder = os.read(fd, 200).decode(errors="replace").strip() or "another process"
      os.close(fd)
      raise OutputBusyError(f"{path} is being written by {holder} right now: wait until it "
                            f"ends (then rerun to replace its output, or use it) or name "
                            f"another destination for vit_jax.{kind}") from None
    if os.path.exists(lock) and os.stat(lock).st_ino == os.fstat(fd).st_ino:
      break  # else its holder removed it between our open and flock: take a fresh one
    os.close(fd)
  try:
    os.ftruncate(fd, 0)
    os.write(fd, f"vit_jax.{kind} (pid {os.getpid()})".encode())
    yield
  finally:
    with contextlib.suppress(OSError):  # left behind, it is taken over by the next writer
      os.remove(lock)  # before the flock goes: a waiter that opened it then retries
    os.close(fd)


def written_by(kind: str) -> Dict[str, str]:
  """The stamp a writer of `kind` ("convert", "fewshot", ...) puts in its marker or JSON."""
  return {"written_by": f"vit_jax.{kind}"}


def _stamp_of(path: str) -> Optional[str]:
  """The "written_by" of a JSON file (a marker, a result file); None for anything else."""
  try:
    if not fs.isfile(path) or (not fs.is_url(path) and os.path.getsize(path) > 1 << 20):
      return None  # no stamp of ours is that large
    value = json.loads(fs.read_bytes(path))
  except (OSError, ValueError):
    return None
  return value.get("written_by") if isinstance(value, dict) else None


def _check_parents(path: str) -> None:
  """A path under an existing file cannot be created: say so instead of [Errno 17]/[20]
  (object stores have no such paths)."""
  if fs.is_url(path):
    return
  parent = os.path.dirname(os.path.abspath(path))
  while not os.path.exists(parent) and os.path.dirname(parent) != parent:
    parent = os.path.dirname(parent)
  if not os.path.isdir(parent):
    raise OutputExistsError(f"cannot write {path}: {parent} is a file, not a folder; pick "
                            "another path")


def _listing(names: List[str]) -> str:
  names = sorted(names)
  return ", ".join(names[:3]) + (f" (+{len(names) - 3} more)" if len(names) > 3 else "")


def check_output_dir(path: str, kind: str, overwrite: bool = False) -> None:
  """Raises OutputExistsError unless `path` is new, empty, our `kind`'s earlier output, or
  `overwrite`; writes nothing (call it before slow work, then claim_output_dir)."""
  path = os.fspath(path)
  _check_parents(path)
  if fs.isfile(path):
    raise OutputExistsError(f"{path} is a file, not a folder: name a new folder for the "
                            f"output of vit_jax.{kind}")
  if overwrite:
    return
  entries = [name for name in fs.listdir(path) if name != MARKER]
  owner = _stamp_of(fs.join(path, MARKER))
  if entries and owner != written_by(kind)["written_by"]:
    what = f"the output of {owner}" if owner else f"files it did not write ({_listing(entries)})"
    raise OutputExistsError(f"{path} already holds {what}: name a new folder for vit_jax.{kind}"
                            ", or pass --overwrite to write into it")


def claim_output_dir(path: str, kind: str, overwrite: bool = False) -> str:
  """The folder `path`, created if missing and marked as `kind`'s output, after
  check_output_dir; returns the path."""
  check_output_dir(path, kind, overwrite)
  path = os.fspath(path)
  fs.makedirs(path)
  marker = fs.join(path, MARKER)
  if _stamp_of(marker) != written_by(kind)["written_by"]:
    fs.write_atomic(marker, json.dumps(written_by(kind)))
  return path


def claim_output_file(path: str, kind: str, overwrite: bool = False) -> None:
  """Raises OutputExistsError unless the file `path` is absent, a JSON file stamped
  written_by(kind) (write yours with that stamp), or `overwrite`."""
  path = os.fspath(path)
  _check_parents(path)
  if fs.isdir(path):
    raise OutputExistsError(f"{path} is a folder, not a file: name the file to write")
  if fs.exists(path) and not overwrite and _stamp_of(path) != written_by(kind)["written_by"]:
    raise OutputExistsError(f"{path} already exists and vit_jax.{kind} did not write it: "
                            "name a new file, or pass --overwrite to replace it")
