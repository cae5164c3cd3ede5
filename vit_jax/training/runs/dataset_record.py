"""dataset.json: what a run trains on, recorded in its workdir when it starts.

Labels are positions in the class list (the sorted class folders of an image directory),
and a checkpoint holds no names: a class folder renamed or added between two runs of the
same command would silently give the resumed run other labels. So the first run records
the class names in label order, the dataset's identity (source, splits, their sizes) and a
fingerprint of each split (vit_jax.data.fingerprint: two class folders swapped keep the
class list, not the fingerprints). A resume refuses a different class list in one line
that shows the difference, and changed data in one line that counts the files relabelled
(another class folder, or other labels in a multi-label folder's labels.csv), added,
removed or replaced (what is and is not detected: docs/fingerprint.md); files only replaced
in place (a corrupt image fixed) keep every label, so they only warn.
--config.allow_data_change=True goes on with changed data (not with other classes). Every change a
resume accepts is recorded under `data_changes`.
"""

import json
import os
from typing import Any, Dict, List, Optional, Sequence

from vit_jax.base import errors, storage, workdir_files
from vit_jax.base.console import log
from vit_jax.data import fingerprint


_SHOWN = 4  # changes listed in the one-line error


class ClassesChangedError(errors.InvalidInput):
  """The dataset's classes differ from those the run started with; one line."""


class DataChangedError(errors.InvalidInput):
  """A split's examples differ from those the run started with; one line counting how."""


def describe(config, info, fingerprints: Dict[str, Any]) -> Dict[str, Any]:
  """The record of config.dataset as opened (`info`: datasets.DatasetInfo; fingerprints:
  {'train': ..., 'eval': ...} from vit_jax.data.fingerprint)."""
  source, splits = config.dataset, (config.get("train_split"), config.get("eval_split"))
  if isinstance(source, str) and os.path.isdir(os.path.expanduser(source)):
    source = os.path.abspath(os.path.expanduser(source))
    splits = (None, None)  # a directory's splits are its train/ and test/ folders
  return {"source": source, "train_split": splits[0], "eval_split": splits[1],
          "num_train": info.num_train,
          "num_eval": info.num_eval, "num_classes": info.num_classes,
          "class_names": list(info.class_names),
          # examples per class seen in the train split (positives, for multi-label data;
          # None when it is streamed), what class_weights='balanced' is computed from
          "multi_label": info.multi_label, "train_class_counts": info.train_class_counts,
          "fingerprints": fingerprints}


def read(workdir: str) -> Optional[Dict[str, Any]]:
  """The workdir's record; None if it has none (a run from before records existed)."""
  path = storage.join(workdir, workdir_files.DATASET_RECORD)
  if not storage.exists(path):
    return None
  try:
    return json.loads(storage.read_text(path))
  except ValueError:
    raise errors.InvalidInput(f"{path} is damaged (not JSON): restore it from a backup, or "
                              "delete it to resume without checking the class list") from None


def write(workdir: str, record: Dict[str, Any]) -> None:
  storage.write_atomic(storage.join(workdir, workdir_files.DATASET_RECORD),
                  json.dumps(record, indent=2, sort_keys=True))


def _names(names: Sequence[str]) -> str:
  shown = ", ".join(repr(n) for n in names[:_SHOWN])  # repr: undecodable bytes print too
  return shown + (f" (+{len(names) - _SHOWN} more)" if len(names) > _SHOWN else "")


def describe_change(old: List[str], new: List[str]) -> str:
  """What differs between two class lists: names removed and added, labels moved."""
  parts = []
  removed = [n for n in old if n not in set(new)]
  added = [n for n in new if n not in set(old)]
  if removed:
    parts.append(f"removed {_names(removed)}")
  if added:
    parts.append(f"added {_names(added)}")
  moved = [f"label {i} was {a!r}, now {b!r}" for i, (a, b) in enumerate(zip(old, new))
           if a != b]
  if moved:
    parts.append("; ".join(moved[:_SHOWN]) + (f" (+{len(moved) - _SHOWN} more)"
                                              if len(moved) > _SHOWN else ""))
  if len(old) != len(new):
    parts.append(f"{len(old)} -> {len(new)} classes")
  return "; ".join(parts)


def check_resume(workdir: str, record: Dict[str, Any], *, step: int,
                 allow_change: bool = False) -> Optional[Dict[str, Any]]:
  """Refuses to resume on other classes than the run started with, or on changed data
  unless allow_change; warns about other changes of the dataset's identity. Returns the
  record to write over the old one (the allowed change noted), or None."""
  saved = read(workdir)
  if saved is None:
    return None
  old, new = saved.get("class_names", []), record["class_names"]
  if old != new:
    raise ClassesChangedError(
        f"the classes of {record['source']} changed since this run started in {workdir} "
        f"({workdir_files.DATASET_RECORD}): {describe_change(old, new)}; resuming would train "
        "on other labels: restore the class folders as they were, or use a new --workdir")
  before = saved.get("fingerprints", {})
  changed = {split: fingerprint.describe_change(before[split], value)
             for split, value in record["fingerprints"].items()
             if fingerprint.changed(before.get(split, value), value)}
  relabelling = {split: text for split, text in changed.items()
                 if not fingerprint.labels_kept(before[split], record["fingerprints"][split])}
  if relabelling and not allow_change:
    raise DataChangedError(
        f"the data of {record['source']} changed since this run started in {workdir} "
        f"({workdir_files.DATASET_RECORD}): "
        f"{'; '.join(f'{k} split: {v}' for k, v in relabelling.items())}; restore it, use a "
        "new --workdir, or pass --config.allow_data_change=True to resume on it")
  identity = [f"{key} {saved.get(key)} -> {record[key]}" for key in
              ("source", "train_split", "eval_split", "num_train", "num_eval")
              if saved.get(key) != record[key]]
  if identity or changed:
    log.warning("the dataset changed since this run started (%s); resuming on it",
                "; ".join(identity + [f"{k} split: {v}" for k, v in changed.items()]))
  if not changed:
    return None
  history = saved.get("data_changes", []) + [{"resumed_at_step": step, "changes": changed}]
  return {**record, "data_changes": history}
