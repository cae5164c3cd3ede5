"""python -m vit_jax.vtab --checkpoint=CHECKPOINT --workdir=DIR [--tasks=...] [--lr_sweep]

VTAB-1k (paper section 4.2): fine-tunes CHECKPOINT on each task with the paper's VTAB
setting (lr 0.01, 2,500 steps, batch 512, 384 px), one main-job run per task in
DIR/<task>/, then writes DIR/vtab.json and DIR/vtab.md and prints the table. --tasks
takes task names, groups (natural, specialized, structured) and image directories;
--lr_sweep first selects lr and schedule on the 200-example validation sets. Any config
key can be overridden (--config.batch=64 --config.pp.crop=224). Rerunning the same
command resumes: finished runs are skipped. The runs are in vit_jax.vtab.runner.
"""

from absl import flags
from ml_collections import config_flags

from vit_jax.base import cli, console, errors, no_clobber
from vit_jax.checkpoints import hub
from vit_jax.data.sources import vtab_tasks as tasks_lib
from vit_jax.training.runs import workdir as workdir_lib
from vit_jax.vtab import report as vtab_report, runner


@cli.command
def main(argv, flag_values=flags.FLAGS):
  cli.no_arguments(argv)
  overrides = config_flags.get_override_values(flag_values["config"])
  sweep = None
  stray = [f"--{name}" for name in ("sweep_lrs", "sweep_steps", "sweep_select")
           if flag_values[name].present]
  if stray and not flag_values.lr_sweep:
    raise cli.UsageError(f"{' and '.join(stray)} need --lr_sweep (without it every task "
                         "runs the config's lr and steps)")
  if flag_values.lr_sweep:
    sweep = (cli.positive_numbers(flag_values.sweep_lrs, float, "sweep_lrs"),
             cli.positive_numbers(flag_values.sweep_steps, int, "sweep_steps"))
  try:
    runner.check_overrides(overrides, sweep is not None)
    runner.resolve_tasks(flag_values.tasks)
  except errors.InvalidInput as e:
    raise cli.UsageError(str(e)) from None
  cli.keep_tensorflow_off_accelerators()
  from vit_jax.training import loop  # jax and the models: only once the flags are right
  try:
    report = runner.run_benchmark(flag_values.config, flag_values.tasks,
                                       checkpoint=flag_values.checkpoint,
                                       workdir=workdir_lib.resolve(flag_values.workdir),
                                       overrides=overrides, sweep=sweep,
                                       select=flag_values.sweep_select,
                                       train_fn=loop.train_and_evaluate,
                                       overwrite=flag_values.overwrite)
  except runner.Preempted as e:
    console.log.warning("%s", e)
    return
  print(vtab_report.format_table(report), end="")


def define_flags(flag_values=flags.FLAGS) -> None:
  """The command's flags; not defined on import, so importers' flags stay their own."""
  define = dict(flag_values=flag_values)
  config_flags.DEFINE_config_dict(
      "config", runner.base_config(), "The settings every task starts from (the paper's VTAB "
      "setting); override any key: --config.batch=64.", lock_config=True, **define)
  flags.DEFINE_string("checkpoint", None, "The checkpoint to fine-tune. " +
                      hub.CHECKPOINT_HELP, **define)
  flags.DEFINE_string("workdir", None, "Where each task's run (WORKDIR/<task>/) and the "
                      "report (vtab.json, vtab.md) go.", **define)
  flags.DEFINE_list("tasks", list(tasks_lib.TASKS), "Tasks to run: VTAB task names, "
                    f"groups ({', '.join(tasks_lib.GROUPS)}) or image directories "
                    "(train/<class>/, test/<class>/); default: all 19.", **define)
  flags.DEFINE_boolean("lr_sweep", False, "Select lr and steps per task on val200 (runs "
                       "trained on train800) before the final run.", **define)
  flags.DEFINE_list("sweep_lrs", [f"{lr:g}" for lr in runner.SWEEP_LRS], "Learning rates "
                    "of the sweep.", **define)
  flags.DEFINE_list("sweep_steps", [str(s) for s in runner.SWEEP_STEPS], "Schedule lengths "
                    "(steps) of the sweep.", **define)
  flags.DEFINE_enum("sweep_select", "mean", runner.SELECTIONS, "mean: the setting with the "
                    "best mean val200 accuracy, for all tasks (the paper's choice); task: the "
                    "best setting per task.", **define)
  flags.DEFINE_boolean("overwrite", False, no_clobber.OVERWRITE_HELP + " For --workdir: one "
                       "that holds no earlier VTAB run.", **define)
  flags.mark_flags_as_required(["checkpoint", "workdir"], flag_values=flag_values)


if __name__ == "__main__":
  cli.run(main, define_flags)
