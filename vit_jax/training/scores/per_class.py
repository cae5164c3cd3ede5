"""Per-class numbers of a single-label evaluation set, from the counts its eval step adds
up over the whole split (objectives.classification.class_sums): a run whose accuracy
looks fine can still fail on three classes out of forty, and only these show it.

Definitions are scikit-learn's: recall of class c = correct c / examples of c; precision
= correct c / predictions of c; balanced accuracy = the mean recall over the classes the
split has examples of (balanced_accuracy_score). A recall or precision with nothing to
divide by is undefined (None in JSON, left out of means), not 0.
"""

import dataclasses
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

WORST_SHOWN = 5  # classes listed in final_metrics.json


@dataclasses.dataclass
class ClassReport:
  """One set's per-class results at one evaluation. `values` holds arrays [K] by name
  (NaN: undefined); `rank_by` names the one whose lowest values are the worst classes;
  `confusion` is the [true, predicted] count matrix when it was summed."""
  class_names: List[str]
  values: Dict[str, np.ndarray]
  rank_by: str
  confusion: Optional[np.ndarray] = None

  def to_json(self) -> dict:
    out = {name: [_plain(v) for v in array] for name, array in self.values.items()}
    if self.confusion is not None:
      out["confusion_matrix"] = self.confusion.astype(np.int64).tolist()
    return out

  def worst(self, count: int = WORST_SHOWN) -> List[dict]:
    """The `count` classes with the lowest defined `rank_by` value, each with its name
    and every per-class value (lowest first; ties in class order)."""
    ranked = self.values[self.rank_by]
    defined = np.flatnonzero(~np.isnan(ranked))
    order = defined[np.argsort(ranked[defined], kind="stable")][:count]
    return [{"class": int(c), "name": self.class_names[c],
             **{name: _plain(v[c]) for name, v in self.values.items()}} for c in order]


def _plain(value):
  """A JSON value: counts as int, NaN (undefined) as None."""
  if np.issubdtype(type(value), np.integer):
    return int(value)
  return None if np.isnan(value) else float(value)


def _ratio(numerator: np.ndarray, denominator: np.ndarray) -> np.ndarray:
  with np.errstate(divide="ignore", invalid="ignore"):
    return np.where(denominator > 0, numerator / np.maximum(denominator, 1), np.nan)


def counts(sums: Dict[str, np.ndarray]) -> Tuple[np.ndarray, np.ndarray, np.ndarray,
                                                 Optional[np.ndarray]]:
  """(examples per true class, predictions per class, correct per class, confusion or
  None) from either form of class_sums."""
  if "confusion" in sums:
    confusion = np.rint(np.asarray(sums["confusion"], np.float64))
    return confusion.sum(1), confusion.sum(0), np.diag(confusion).copy(), confusion
  return tuple(np.rint(np.asarray(sums[k], np.float64))
               for k in ("class_true", "class_predicted", "class_correct")) + (None,)


def summarize(sums: Dict[str, np.ndarray],
              class_names: Sequence[str]) -> Tuple[Dict[str, float], ClassReport]:
  """({'balanced_accuracy'}, the report) of a set's summed class counts."""
  true, predicted, correct, confusion = counts(sums)
  recall, precision = _ratio(correct, true), _ratio(correct, predicted)
  present = true > 0
  balanced = float(np.mean(recall[present])) if present.any() else float("nan")
  report = ClassReport(list(class_names), {"recall": recall, "precision": precision,
                                           "examples": true.astype(np.int64)}, "recall", confusion)
  return {"balanced_accuracy": balanced}, report
