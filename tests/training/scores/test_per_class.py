"""Per-class metrics of single-label sets against scikit-learn on the same predictions,
summed over batches that do not divide the split (padding rows masked)."""

import jax.numpy as jnp
import numpy as np
import pytest
from sklearn import metrics as sk

from vit_jax.training.objectives import classification
from vit_jax.training.scores import per_class

NUM_CLASSES = 6


def predictions(size=53, seed=0):
  """Labels and predictions where class 5 is never predicted and class 4 never true."""
  rng = np.random.default_rng(seed)
  true = rng.choice([0, 1, 2, 3, 5], size)
  predicted = np.where(rng.uniform(size=size) < 0.6, true, rng.integers(0, 5, size))
  return true, np.where(predicted == 5, 1, predicted)


def summed(true, predicted, batch, limit=None):
  """class_sums over fixed-size batches, the last padded with masked copies of row 0."""
  totals = None
  for start in range(0, len(true), batch):
    t, p = true[start:start + batch], predicted[start:start + batch]
    pad = batch - len(t)
    mask = np.r_[np.ones(len(t)), np.zeros(pad)] > 0
    t, p = np.r_[t, np.full(pad, true[0])], np.r_[p, np.full(pad, predicted[0])]
    if limit is not None:
      classification.CONFUSION_MAX_CLASSES = limit
    try:
      sums = classification.class_sums(jnp.asarray(p), jnp.asarray(t), jnp.asarray(mask),
                                       NUM_CLASSES)
    finally:
      classification.CONFUSION_MAX_CLASSES = 1000
    sums = {k: np.asarray(v) for k, v in sums.items()}
    totals = sums if totals is None else {k: totals[k] + v for k, v in sums.items()}
  return totals


@pytest.mark.parametrize("batch", [8, 53, 64])
def test_confusion_recall_precision_and_balanced_accuracy_match_sklearn(batch):
  true, predicted = predictions()
  sums = summed(true, predicted, batch)
  labels = list(range(NUM_CLASSES))
  np.testing.assert_array_equal(sums["confusion"], sk.confusion_matrix(true, predicted,
                                                                       labels=labels))
  scalars, report = per_class.summarize(sums, [f"c{i}" for i in labels])
  with pytest.warns(UserWarning, match="y_pred contains classes not in y_true"):
    expected_balanced = sk.balanced_accuracy_score(true, predicted)
  assert scalars["balanced_accuracy"] == pytest.approx(expected_balanced, rel=1e-12)
  recall = sk.recall_score(true, predicted, labels=labels, average=None, zero_division=np.nan)
  precision = sk.precision_score(true, predicted, labels=labels, average=None,
                                 zero_division=np.nan)
  np.testing.assert_allclose(report.values["recall"], recall, equal_nan=True)
  np.testing.assert_allclose(report.values["precision"], precision, equal_nan=True)
  as_json = report.to_json()
  assert as_json["recall"][4] is None and as_json["precision"][5] is None  # undefined, not 0
  assert as_json["examples"] == np.bincount(true, minlength=NUM_CLASSES).tolist()
  worst = report.worst(3)
  defined = [c for c in labels if not np.isnan(recall[c])]
  assert [w["class"] for w in worst] == sorted(defined, key=lambda c: recall[c])[:3]
  assert worst[0]["name"] == f"c{worst[0]['class']}"


def test_many_classes_sum_the_margins_only_and_give_the_same_numbers():
  true, predicted = predictions(seed=1)
  full = per_class.summarize(summed(true, predicted, 16), list("abcdef"))
  margins = summed(true, predicted, 16, limit=NUM_CLASSES - 1)
  assert "confusion" not in margins
  scalars, report = per_class.summarize(margins, list("abcdef"))
  assert scalars == full[0] and report.confusion is None
  for name in ("recall", "precision", "examples"):
    np.testing.assert_array_equal(report.values[name], full[1].values[name])
