"""The names of the files a run keeps in its workdir, in one place.

On the base floor, outside runs/: the checkpoints (a run's folder given as a checkpoint)
and the objectives (their advice) name these files too, and must not import runs/ for it.

The loop writes them, the VTAB runner and the end-of-run summary read or name them, the
objectives name params.npz in their advice, and users' scripts rely on them (they are
public). Names only, no imports: naming a run's file never imports what writes it.
"""

CONFIG = "config.json"  # the run's config at its start
PARAMETER_TABLE = "parameters.txt"
DATASET_RECORD = "dataset.json"  # the labels and examples a resumed run must see again
LOCK = "run.lock"  # held by the one job that may write here
CHECKPOINTS = "checkpoints"  # orbax train states, one folder per step
DAMAGED_CHECKPOINTS = "damaged_checkpoints"  # set aside, never deleted
METRICS = "metrics.jsonl"
SUPERSEDED_METRICS = "metrics.superseded.jsonl"  # lines past a resumed step
METRIC_PARTS = "metrics.parts"  # object stores only: one object per write until the run closes
PER_CLASS = "per_class_metrics.json"
CONFUSION_PNG = "confusion_matrix.png"
PARAMS = "params.npz"  # written last, with FINAL_METRICS: together they mark a finished run
FINAL_METRICS = "final_metrics.json"


def resumed_config(step: int) -> str:
  """The config of a run resumed at `step` with changed settings, beside CONFIG."""
  return f"config.resumed-{step}.json"
