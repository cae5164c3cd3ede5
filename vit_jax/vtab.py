"""python -m vit_jax.vtab --checkpoint=CHECKPOINT --workdir=DIR [--tasks=...] [--lr_sweep]

VTAB-1k (paper section 4.2): fine-tunes CHECKPOINT on each task with the paper's VTAB
setting (lr 0.01, 2,500 steps, batch 512, 384 px), one main-job run per task in
DIR/<task>/, then writes DIR/vtab.json and DIR/vtab.md and prints the table. --tasks
takes task names, groups (natural, specialized, structured) and image directories;
--lr_sweep first selects lr and schedule on the 200-example validation sets. Any config
key can be overridden (--config.batch=64 --config.pp.crop=224). Rerunning the same
command resumes: finished runs are skipped. The runs are in vit_jax.evaluators.vtab.
"""

import sys

from absl import app, flags
from ml_collections import config_flags

from vit_jax import cli, console
from vit_jax.data import vtab as tasks_lib
from vit_jax.evaluators import vtab
from vit_jax.runs import outputs

# Mistakes a user can fix: one `error:` line. The checkpoint classes are ValueErrors.
USER_ERRORS = (ValueError, FileNotFoundError, FloatingPointError)
FLAG_ERRORS = (flags.Error, AttributeError, KeyError, TypeError, ValueError)


def _innermost(error: BaseException) -> BaseException:
  while error.args and isinstance(error.args[0], BaseException):  # config_dict nests errors
    error = error.args[0]
  return error


def _one_line(error: BaseException) -> str:
  error = _innermost(error)
  return " ".join(str(error.args[0] if error.args else error).split())


def _flag_error(error: BaseException):
  unknown = "no config key " if isinstance(_innermost(error), (AttributeError, KeyError)) else ""
  print(f"error: bad flag or config override: {unknown}{_one_line(error)}", file=sys.stderr)
  sys.exit(2)


def parse_flags(argv):
  """absl's parsing, with a bad --config.KEY override as one line (exit 2)."""
  try:
    return flags.FLAGS(argv)
  except FLAG_ERRORS as e:
    _flag_error(e)


def _numbers(values, kind, flag: str):
  try:
    numbers = tuple(kind(v) for v in values)
  except ValueError:
    numbers = ()
  if not numbers or min(numbers) <= 0:
    raise app.UsageError(f"--{flag}={','.join(values)} must be positive numbers")
  return numbers


def main(argv, flag_values=flags.FLAGS):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")
  overrides = config_flags.get_override_values(flag_values["config"])
  sweep = None
  stray = [f"--{name}" for name in ("sweep_lrs", "sweep_steps", "sweep_select")
           if flag_values[name].present]
  if stray and not flag_values.lr_sweep:
    raise app.UsageError(f"{' and '.join(stray)} need --lr_sweep (without it every task "
                         "runs the config's lr and steps)")
  if flag_values.lr_sweep:
    sweep = (_numbers(flag_values.sweep_lrs, float, "sweep_lrs"),
             _numbers(flag_values.sweep_steps, int, "sweep_steps"))
  try:
    vtab.check_overrides(overrides, sweep is not None)
    vtab.resolve_tasks(flag_values.tasks)
  except ValueError as e:
    raise app.UsageError(str(e)) from None
  import tensorflow as tf  # tf.data only: keep TensorFlow off the accelerators.
  tf.config.set_visible_devices([], "GPU")
  try:
    report = vtab.run_benchmark(flag_values.config, flag_values.tasks,
                                checkpoint=flag_values.checkpoint, workdir=flag_values.workdir,
                                overrides=overrides, sweep=sweep,
                                select=flag_values.sweep_select,
                                overwrite=flag_values.overwrite)
  except vtab.Preempted as e:
    console.log.warning("%s", e)
    return
  except USER_ERRORS as e:
    print(f"error: {_one_line(e)}", file=sys.stderr)
    sys.exit(1)
  print(vtab.format_table(report), end="")


def define_flags(flag_values=flags.FLAGS) -> None:
  """The command's flags; not defined on import, so importers' flags stay their own."""
  define = dict(flag_values=flag_values)
  config_flags.DEFINE_config_dict(
      "config", vtab.base_config(), "The settings every task starts from (the paper's VTAB "
      "setting); override any key: --config.batch=64.", lock_config=True, **define)
  flags.DEFINE_string("checkpoint", None, "Path, URL, FAMILY/NAME or released model name "
                      "to fine-tune.", **define)
  flags.DEFINE_string("workdir", None, "Where each task's run (WORKDIR/<task>/) and the "
                      "report (vtab.json, vtab.md) go.", **define)
  flags.DEFINE_list("tasks", list(tasks_lib.TASKS), "Tasks to run: VTAB task names, "
                    f"groups ({', '.join(tasks_lib.GROUPS)}) or image directories "
                    "(train/<class>/, test/<class>/); default: all 19.", **define)
  flags.DEFINE_boolean("lr_sweep", False, "Select lr and steps per task on val200 (runs "
                       "trained on train800) before the final run.", **define)
  flags.DEFINE_list("sweep_lrs", [f"{lr:g}" for lr in vtab.SWEEP_LRS], "Learning rates "
                    "of the sweep.", **define)
  flags.DEFINE_list("sweep_steps", [str(s) for s in vtab.SWEEP_STEPS], "Schedule lengths "
                    "(steps) of the sweep.", **define)
  flags.DEFINE_enum("sweep_select", "mean", vtab.SELECTIONS, "mean: the setting with the "
                    "best mean val200 accuracy, for all tasks (the paper's choice); task: the "
                    "best setting per task.", **define)
  flags.DEFINE_boolean("overwrite", False, outputs.OVERWRITE_HELP + " For --workdir: one "
                       "that holds no earlier VTAB run.", **define)
  flags.mark_flags_as_required(["checkpoint", "workdir"], flag_values=flag_values)


def define_flags_or_exit(flag_values=flags.FLAGS) -> None:
  """define_flags, where config_flags applies sys.argv's --config.KEY overrides: a bad
  one is one line (exit 2)."""
  try:
    define_flags(flag_values)
  except FLAG_ERRORS as error:
    _flag_error(error)


if __name__ == "__main__":
  define_flags_or_exit()
  cli.run(main, flags_parser=parse_flags)
