"""VTAB-1k benchmark (paper section 4.2 and App. B.1.1): one fine-tune per task through
the main job, optionally the paper's small sweep on the 200-example validation sets, and
the report. The command is vit_jax.vtab; the task definitions are vit_jax.data.sources.vtab_tasks.

Every task is fine-tuned from the same checkpoint with the paper's VTAB setting (SGD
momentum, lr 0.01, 2,500 steps, batch 512, cosine decay after a linear warm-up of 20% of
the steps, i.e. the recipe's 500 at 2,500) at 384 px, in WORKDIR/<task>/: trained on
train800val200, evaluated on test. Preprocessing is BiT's (Kolesnikov et al. 2020), which
the paper follows except that all tasks run at 384 px: train images are resized to
448 px and randomly cropped to 384 with random flips, leaving out the crop (resize to 384)
and/or the flip for tasks whose label they would change (vit_jax.data.sources.vtab_tasks.Task); eval
images are resized to 384.

With a sweep, each setting (lr, steps) is first trained on train800 and evaluated on
val200 in WORKDIR/<task>/sweep/<setting>/; the best setting (per task, or the best mean
over the tasks, as the paper chose one setting for all) then makes the final run.
Every run is the resumable main job: a rerun skips what has finished.
"""

import dataclasses
import itertools
import json
import os
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import ml_collections

from vit_jax.base import errors, no_clobber, object_moves, storage, workdir_files
from vit_jax.base.console import log
from vit_jax.checkpoints import hub, npz
from vit_jax.data.sources import vtab_tasks as tasks_lib
from vit_jax.families.vit import names as vit_names
from vit_jax.models import family_registry
from vit_jax.training import config_defaults
from vit_jax.training.objectives import classification
from vit_jax.training.runs import outputs
from vit_jax.training.runs import workdir as workdir_lib
from vit_jax.vtab import report as vtab_report

KIND = "vtab"  # the writer's name in WORKDIR's no-clobber marker (vit_jax.base.no_clobber)
SWEEP_LRS = (0.001, 0.01)
SWEEP_STEPS = (500, 2_500)  # the two schedules: BiT's HyperRule length and the paper's
SELECTIONS = ("task", "mean")  # best setting per task | one setting, best mean (paper)
WARMUP_FRACTION = 0.2  # of the steps: the recipe's 500 at 2,500 steps, 100 at 500
# Keys each task's run sets itself; the checkpoint is --checkpoint, the tasks --tasks.
RUNNER_KEYS = ("dataset", "train_split", "eval_split", "pretrained")
SWEEP_DIR = "sweep"  # WORKDIR/<task>/sweep/<setting>/: the sweep's runs
SUPERSEDED = "superseded"  # WORKDIR/<task>/superseded/<n>/: runs of earlier settings
SWEPT_KEYS = ("base_lr", "total_steps")  # with a sweep: --sweep_lrs and --sweep_steps
BASE_MODEL = "ViT-Ti_16"  # the base name of a checkpoint whose architecture is not released


def base_config() -> ml_collections.ConfigDict:
  """The defaults every task's config starts from (the paper's VTAB setting); runs set
  the dataset, splits and checkpoint, and --config.KEY=VALUE overrides any other key."""
  config = config_defaults.with_dataset(config_defaults.get_config(), "vtab/caltech101")
  config.pp.preset = "bit"  # resize (448) + random crop (384); no crop: resize == crop
  config.eval_every = config.total_steps  # each run evaluates once, at its end
  return config


@dataclasses.dataclass(frozen=True)
class TaskRun:
  """One entry of the benchmark: a VTAB task or an image directory."""
  name: str  # row label and WORKDIR sub-folder
  group: str  # natural | specialized | structured | custom
  dataset: str  # config.dataset
  crop: bool = True
  flip: bool = True


def resolve_tasks(specs: Sequence[str]) -> List[TaskRun]:
  """--tasks entries (task names, group names, image directories) -> runs in VTAB order,
  directories last; a ValueError names an unknown entry and the valid ones."""
  chosen, directories = set(), []
  for spec in (s.strip() for s in specs):
    if not spec:
      continue
    if spec.startswith(tasks_lib.PREFIX) and spec[len(tasks_lib.PREFIX):] in tasks_lib.TASKS:
      spec = spec[len(tasks_lib.PREFIX):]  # the config's dataset name, vtab/<task>
    if spec in tasks_lib.GROUPS:
      chosen.update(tasks_lib.group_tasks(spec))
    elif spec in tasks_lib.TASKS:
      chosen.add(spec)
    elif os.path.isdir(os.path.expanduser(spec)):
      path = os.path.abspath(os.path.expanduser(spec))
      if path not in [run.dataset for run in directories]:
        directories.append(TaskRun(os.path.basename(path.rstrip(os.sep)),
                                   tasks_lib.CUSTOM_GROUP, path))
    else:  # --tasks splits at commas: a folder named with one arrives in pieces
      raise errors.InvalidInput(
          f"unknown task {spec!r} in --tasks: not a VTAB task, a group "
          f"({', '.join(tasks_lib.GROUPS)}) or an image directory (one whose name has a comma "
          f"must be renamed: --tasks splits at commas); tasks: {', '.join(tasks_lib.TASKS)}")
  runs = [TaskRun(name, task.group, tasks_lib.PREFIX + name, task.crop, task.flip)
          for name, task in tasks_lib.TASKS.items() if name in chosen]
  runs += directories
  names = [run.name for run in runs]
  for name in set(names):
    if names.count(name) > 1:
      clash = [run.dataset for run in runs if run.name == name]
      raise errors.InvalidInput(
          f"--tasks has two tasks named {name!r} ({', '.join(clash)}): each "
          "task's results go to WORKDIR/<name>/; rename a directory")
  if not runs:
    raise errors.InvalidInput("--tasks is empty: name VTAB tasks, groups or image directories")
  for run in directories:  # a folder that cannot be a task fails now, not after the others
    tasks_lib.open_directory(run.dataset, "train800", "val200")
  return runs


# --- Configs ----------------------------------------------------------------------------------


def set_key(config: ml_collections.ConfigDict, dotted: str, value: Any) -> None:
  *parents, key = dotted.split(".")
  for parent in parents:
    config = config[parent]
  setattr(config, key, value)


def check_overrides(overrides: Mapping[str, Any], sweep: bool) -> None:
  """Keys the runner sets per task cannot be overridden (one line naming the flag)."""
  for key in overrides:
    if key in RUNNER_KEYS:
      instead = "--checkpoint" if key == "pretrained" else "--tasks"
      raise errors.InvalidInput(f"--config.{key} is set by each task's run: use {instead}")
    if sweep and key in SWEPT_KEYS:
      raise errors.InvalidInput(
          f"--config.{key} is swept with --lr_sweep: set the grid with "
          "--sweep_lrs and --sweep_steps")


def model_settings(checkpoint: str) -> Dict[str, Any]:
  """The config keys that build the checkpoint's architecture: its released name (and
  that model's reference dropout), or a base name with every architecture field set.
  A released model name is used as is; anything else is read once to infer it."""
  try:
    family = family_registry.for_model_name(checkpoint)
  except errors.InvalidInput:
    family = None  # a file or URL
  if family is not None and family.bucket is not None:  # an architecture's released name
    family.refuse("vtab", checkpoint)
    name, module = family.names.canonical(checkpoint), None
  else:  # a file, or a released name its family fetches as a file
    module, _ = npz.load_npz(hub.resolve(checkpoint), num_classes=1)
    family_registry.for_module(module).refuse("vtab", checkpoint)
  if module is not None:
    fields = [f.name for f in dataclasses.fields(vit_names.Architecture)
              if f.name != "dropout_rate"]
    architecture = vit_names.Architecture(**{f: getattr(module, f) for f in fields})
    name = vit_names.find_name(architecture)
    if name is None:
      return {"model_name": BASE_MODEL, "model.dropout_rate": 0.0,
              **{f"model.{f}": getattr(architecture, f) for f in fields}}
  return {"model_name": name,
          "model.dropout_rate": family_registry.architecture(name).dropout_rate}


def task_config(base: ml_collections.ConfigDict, run: TaskRun, *, checkpoint: str,
                model: Mapping[str, Any], lr: float, steps: int, train_split: str,
                eval_split: str, overrides: Mapping[str, Any]) -> ml_collections.ConfigDict:
  """One run's config: the base, the task and setting, the model, the user's overrides,
  then what follows from them unless overridden too: warm-up (WARMUP_FRACTION of the
  steps), one evaluation at the end (test sets are large), the task's flip, the loss
  config.loss='auto' means for single-label data, and for
  pp.preset 'bit' the task's crop (pp.resize None: HyperRule resize and random crop;
  = pp.crop: the whole image)."""
  config = base.copy_and_resolve_references()
  config.unlock()
  config.dataset, config.train_split, config.eval_split = run.dataset, train_split, eval_split
  config.pretrained = checkpoint
  config.base_lr, config.total_steps = lr, steps
  for key, value in {**model, **overrides}.items():
    set_key(config, key, value)
  derived = {"warmup_steps": round(WARMUP_FRACTION * config.total_steps),
             "eval_every": config.total_steps, "pp.flip": run.flip,
             # a task has one class per image: 'auto' is softmax_xent, written as the run
             # writes it in config.json (a rerun compares its settings with that file)
             "loss": classification.loss_name(config)}
  if config.pp.preset == "bit":
    derived["pp.resize"] = None if run.crop else config.pp.crop
  for key, value in derived.items():
    if key not in overrides:
      set_key(config, key, value)
  return config


def _read_json(path: str) -> Optional[dict]:
  try:
    return json.loads(storage.read_text(path))
  except (OSError, ValueError):
    return None


def changed_settings(workdir: str, config: ml_collections.ConfigDict) -> Optional[List[str]]:
  """The config keys in which the run in `workdir` differs from `config` (None: no run)."""
  saved = _read_json(storage.join(workdir, workdir_files.CONFIG))
  if saved is None:
    return None
  return outputs.changed_keys(saved, json.loads(config.to_json_best_effort(sort_keys=True)))


def finished_metrics(workdir: str) -> Optional[dict]:
  """The final metrics of a run that finished in `workdir` (its settings are checked
  separately, see changed_settings)."""
  final = _read_json(storage.join(workdir, workdir_files.FINAL_METRICS))
  if final is None or not storage.exists(storage.join(workdir, workdir_files.PARAMS)):
    return None
  return final


def set_aside(workdir: str) -> str:
  """Moves the run in `workdir` (all but the sweep runs and earlier set-asides) to
  workdir/superseded/<n>/ and returns that folder: the main job would otherwise report
  that run's results, or resume it, under other settings. Nothing is deleted; a live run
  in the folder (its lock) is refused."""
  with workdir_lib.WorkdirLock(workdir):
    parent = storage.join(workdir, SUPERSEDED)
    dest = storage.join(parent, str(len(storage.listdir(parent)) + 1))
    storage.makedirs(dest)
    left = []  # objects a move could not take
    for name in storage.listdir(workdir):
      if name not in (SWEEP_DIR, SUPERSEDED, workdir_files.LOCK):
        left += storage.move(storage.join(workdir, name), storage.join(dest, name))
  if left:  # a new run beside them would resume or report the old one's files
    raise errors.UserError(
        f"could not move {len(left)} object(s) of the earlier run in {workdir} to {dest}: "
        f"{object_moves.named(left)}; move or delete them, then rerun (nothing was deleted)")
  return dest


class TaskError(errors.UserError):
  """A task's run failed on a user error; the message names the task."""


class Preempted(Exception):
  """A run stopped early (preemption); its checkpoint is saved, a rerun resumes."""


def setting_name(lr: float, steps: int) -> str:
  return f"lr{lr:g}_steps{steps}"


@dataclasses.dataclass
class Runner:
  """Runs the main job for each (task, setting), skipping finished runs."""
  base: ml_collections.ConfigDict
  checkpoint: str
  workdir: str
  overrides: Mapping[str, Any]
  model: Mapping[str, Any]
  train_fn: Callable[[ml_collections.ConfigDict, str], dict]

  def config(self, run: TaskRun, *, lr: float, steps: int,
             splits: Tuple[str, str]) -> ml_collections.ConfigDict:
    return task_config(self.base, run, checkpoint=self.checkpoint, model=self.model, lr=lr,
                       steps=steps, train_split=splits[0], eval_split=splits[1],
                       overrides=self.overrides)

  def __call__(self, run: TaskRun, workdir: str, *, lr: float, steps: int,
               splits: Tuple[str, str], what: str) -> Tuple[dict, ml_collections.ConfigDict]:
    """(final metrics, config) of the run, trained now or found finished."""
    config = self.config(run, lr=lr, steps=steps, splits=splits)
    changed = changed_settings(workdir, config)
    done = finished_metrics(workdir) if changed == [] else None
    if done is not None:
      log.info("  %s: skipped, already finished (top-1 %.4f in %s)", what,
               done["eval/accuracy"], workdir)
      return done, config
    if changed:
      log.warning("  %s: %s holds a run with other settings (%s); moved to %s, training "
                  "anew", what, workdir, ", ".join(changed), set_aside(workdir))
    log.info("  %s: lr %g, %d steps, %s -> %s, in %s", what, config.base_lr,
             config.total_steps, splits[0], splits[1], workdir)
    try:
      result = self.train_fn(config, workdir)
    except (errors.UserError, OSError) as e:
      raise TaskError(f"task {run.name}: {e}") from e
    if "preempted_at_step" in result:
      raise Preempted(f"preempted during task {run.name} ({what}) at step "
                      f"{result['preempted_at_step']}: rerun the same command to resume")
    return result, config


def select_settings(val: Mapping[str, Mapping[str, float]], mode: str) -> Dict[str, str]:
  """Chosen setting per task from val200 accuracies {task: {setting: accuracy}}: the best
  per task ('task'), or the one with the best mean over the tasks for all ('mean'). Ties
  go to the earlier setting in grid order."""
  if mode == "task":
    return {task: max(accs, key=accs.get) for task, accs in val.items()}
  settings = list(next(iter(val.values())))
  means = {s: sum(accs[s] for accs in val.values()) / len(val) for s in settings}
  best = max(settings, key=means.get)
  return {task: best for task in val}


def _top1(result: Mapping[str, float]) -> Dict[str, float]:
  return {"top1": result["eval/accuracy"], "loss": result["eval/loss"],
          "examples": int(result["eval/examples"])}


def run_benchmark(base: ml_collections.ConfigDict, specs: Sequence[str], *, checkpoint: str,
                  workdir: str, overrides: Optional[Mapping[str, Any]] = None,
                  sweep: Optional[Tuple[Sequence[float], Sequence[int]]] = None,
                  select: str = "task",
                  train_fn: Callable[[ml_collections.ConfigDict, str], dict],
                  overwrite: bool = False) -> Dict[str, Any]:
  """Fine-tunes and evaluates every task of `specs`; writes WORKDIR/vtab.json and
  vtab.md and returns the report. `sweep` = (lrs, steps) runs the model selection first.
  `overrides` are the user's --config.KEY values, applied last to every run. WORKDIR must
  be new, empty or an earlier VTAB run's, unless overwrite (see vit_jax.base.no_clobber)."""
  overrides = dict(overrides or {})
  check_overrides(overrides, sweep is not None)
  if select not in SELECTIONS:
    raise errors.InvalidInput(f"unknown selection {select!r}; use one of {', '.join(SELECTIONS)}")
  runs = resolve_tasks(specs)
  no_clobber.claim_output_dir(workdir, KIND, overwrite)
  runner = Runner(base, checkpoint, workdir, overrides, model_settings(checkpoint), train_fn)
  log.info("VTAB-1k: %d task(s) from %s in %s%s", len(runs), checkpoint, workdir,
           " with the lr/schedule sweep" if sweep else "")

  chosen = {run.name: (base.base_lr, base.total_steps) for run in runs}
  val = {}
  if sweep is not None:
    grid = list(itertools.product(sweep[0], sweep[1]))
    for i, run in enumerate(runs, 1):
      log.info("sweep, task %d of %d: %s (%s)", i, len(runs), run.name, run.group)
      val[run.name] = {}
      for lr, steps in grid:
        name = setting_name(lr, steps)
        result, _ = runner(run, storage.join(workdir, run.name, SWEEP_DIR, name), lr=lr,
                           steps=steps, splits=("train800", "val200"), what=f"sweep {name}")
        val[run.name][name] = result["eval/accuracy"]
    by_name = {setting_name(lr, steps): (lr, steps) for lr, steps in grid}
    for task, name in select_settings(val, select).items():
      chosen[task] = by_name[name]
      log.info("%s: chose %s (val200 top-1 %.4f)", task, name, val[task][name])

  results = {}
  for i, run in enumerate(runs, 1):
    lr, steps = chosen[run.name]
    log.info("task %d of %d: %s (%s)", i, len(runs), run.name, run.group)
    result, config = runner(run, storage.join(workdir, run.name), lr=lr, steps=steps,
                            splits=tasks_lib.DEFAULT_SPLITS, what="final run")
    results[run.name] = {"group": run.group, "dataset": run.dataset, **_top1(result),
                         **tasks_lib.task_version(run.dataset, config.tfds_data_dir),
                         "base_lr": config.base_lr, "total_steps": config.total_steps,
                         "workdir": storage.join(workdir, run.name)}
    if sweep is not None:
      results[run.name]["val200"] = val[run.name]
  report = {"checkpoint": checkpoint,
            "sweep": {"lrs": list(sweep[0]), "steps": list(sweep[1]), "select": select}
                     if sweep else None,
            "tasks": results, **vtab_report.summarize(runs, results)}
  vtab_report.write(report, workdir)
  return report
