"""The VTAB-1k report (vit_jax.vtab.runner runs the tasks): each task's top-1 grouped as the
paper reports VTAB, each group's mean and the mean, written as WORKDIR/vtab.json and the
Markdown table WORKDIR/vtab.md that the command also prints."""

import json
from typing import Any, Dict, Mapping, Sequence

from vit_jax.base import storage
from vit_jax.data.sources import vtab_tasks as tasks_lib

JSON, MARKDOWN = "vtab.json", "vtab.md"
GROUP_TITLES = {"natural": "Natural", "specialized": "Specialized",
                "structured": "Structured", tasks_lib.CUSTOM_GROUP: "Custom"}


def _mean(values: Sequence[float]) -> float:
  return sum(values) / len(values)


def summarize(runs: Sequence[Any], results: Mapping[str, dict]) -> Dict[str, Any]:
  """Group means over the tasks run in each group and the mean over all tasks run
  (custom tasks count in the mean, in no VTAB group); `runs` are the runner's TaskRuns."""
  groups = {}
  for group in (*tasks_lib.GROUPS, tasks_lib.CUSTOM_GROUP):
    members = [run.name for run in runs if run.group == group]
    if members:
      groups[group] = {"mean": _mean([results[name]["top1"] for name in members]),
                       "tasks": len(members)}
      if group != tasks_lib.CUSTOM_GROUP:
        groups[group]["of"] = len(tasks_lib.group_tasks(group))
  return {"groups": groups, "mean": _mean([results[run.name]["top1"] for run in runs]),
          "num_tasks": len(runs)}


def _tasks(count: int) -> str:
  return f"{count} task{'' if count == 1 else 's'}"


def _version(task: Mapping[str, Any]) -> str:
  """The TFDS version a task read, marked where it is not the benchmark's."""
  if "tfds_version" not in task:
    return "(image directory)"
  if "version_note" in task:
    return f"{task['tfds_version']} (benchmark: {task['reference_version']})"
  return task["tfds_version"]


def format_table(report: Mapping[str, Any]) -> str:
  """Markdown: tasks grouped as the paper reports VTAB, each group's mean, the mean."""
  sweep = report["sweep"]
  lines = [f"VTAB-1k: `{report['checkpoint']}` fine-tuned on train800val200, top-1 on test"
           + (f"; settings chosen on val200 ({sweep['select']})" if sweep else "") + ".", "",
           "| Group | Task | Top-1 (%) | lr | steps | TFDS version |",
           "|---|---|---:|---:|---:|---|"]
  tasks = report["tasks"]
  for group, summary in report["groups"].items():
    title = GROUP_TITLES[group]
    for name, task in tasks.items():
      if task["group"] == group:
        lines.append(f"| {title} | {name} | {100 * task['top1']:.2f} | {task['base_lr']:g} "
                     f"| {task['total_steps']} | {_version(task)} |")
    count = (f"{summary['tasks']} of {summary['of']} tasks" if "of" in summary
             else f"{_tasks(summary['tasks'])}, in no VTAB group")
    lines.append(f"| **{title} mean** | {count} | **{100 * summary['mean']:.2f}** | | | |")
  custom = report["groups"].get(tasks_lib.CUSTOM_GROUP)
  included = f", {custom['tasks']} custom included" if custom else ""
  lines.append(f"| **Mean** | {_tasks(report['num_tasks'])}{included} | "
               f"**{100 * report['mean']:.2f}** | | | |")
  return "\n".join(lines) + "\n"


def write(report: Mapping[str, Any], workdir: str) -> None:
  storage.write_atomic(storage.join(workdir, JSON), json.dumps(report, indent=2))
  storage.write_atomic(storage.join(workdir, MARKDOWN), format_table(report))
