"""Multi-label metrics against scikit-learn on the same scores (ties, classes without
positives, all-negative examples), from padded batches that do not divide the split."""

import jax.numpy as jnp
import numpy as np
import pytest
from sklearn import metrics as sk

from vit_jax.training.scores import multilabel

N, K = 61, 5


def scores_and_labels(seed=0):
  """Scores rounded to 2 decimals (ties), class 3 without positives, rows without labels."""
  rng = np.random.default_rng(seed)
  labels = rng.uniform(size=(N, K)) < 0.35
  labels[:, 3] = False
  labels[:4] = False
  scores = np.round(np.clip(0.4 * labels + rng.uniform(size=(N, K)) * 0.7, 0, 1), 2)
  return scores.astype(np.float32), labels


def padded_batches(scores, labels, batch):
  """What the eval step hands the host: fixed-size batches, padding rows masked out (they
  repeat a real row, with scores and labels that would count if the mask were ignored)."""
  batches = []
  for start in range(0, N, batch):
    s, l = scores[start:start + batch], labels[start:start + batch]
    pad = batch - len(s)
    batches.append({"scores": np.r_[s, np.ones((pad, K), np.float32)],
                    "labels": np.r_[l, np.ones((pad, K), bool)].astype(np.int8),
                    "mask": np.r_[np.ones(len(s)), np.zeros(pad)].astype(np.float32)})
  return batches


@pytest.mark.parametrize("batch", [7, 61, 64])
def test_map_and_f1_match_sklearn(batch):
  scores, labels = scores_and_labels()
  scalars, report = multilabel.summarize(padded_batches(scores, labels, batch),
                                         list("abcde"), threshold=0.5)
  with_positives = [k for k in range(K) if labels[:, k].any()]
  ap = [sk.average_precision_score(labels[:, k], scores[:, k]) for k in with_positives]
  np.testing.assert_allclose(report.values["ap"][with_positives], ap, rtol=1e-12)
  assert np.isnan(report.values["ap"][3]) and report.to_json()["ap"][3] is None
  assert scalars["map"] == pytest.approx(np.mean(ap), rel=1e-12)
  predicted = scores >= 0.5
  assert scalars["f1_micro"] == pytest.approx(
      sk.f1_score(labels, predicted, average="micro", zero_division=0), rel=1e-12)
  assert scalars["f1_macro"] == pytest.approx(
      sk.f1_score(labels, predicted, average="macro", zero_division=0), rel=1e-12)
  assert report.values["positives"].tolist() == labels.sum(0).tolist()
  assert [w["name"] for w in report.worst(2)] == [
      "abcde"[k] for k in np.argsort(report.values["ap"][with_positives])[:2]]


def test_the_threshold_decides_what_is_predicted():
  scores, labels = scores_and_labels(seed=1)
  batches = padded_batches(scores, labels, 16)
  for threshold in (0.3, 0.8):
    scalars, _ = multilabel.summarize(batches, list("abcde"), threshold=threshold)
    assert scalars["f1_micro"] == pytest.approx(
        sk.f1_score(labels, scores >= threshold, average="micro", zero_division=0))


def test_the_eval_step_sums_real_rows_and_hands_back_scores():
  logits = np.array([[2.0, -1.0, 0.5], [-3.0, 1.0, 4.0], [0.0, 0.0, 9.0]], np.float32)
  labels = np.array([[1, 0, 1], [1, 0, 0], [0, 0, 1]], np.int32)  # row 2 is padding

  class Fixed:
    @staticmethod
    def apply(variables, images, train):
      return jnp.asarray(logits)

  out = multilabel.make_eval_step(Fixed)({}, {"image": jnp.zeros((3, 1)), "label": labels,
                                              "mask": jnp.asarray([1.0, 1.0, 0.0])})
  assert (float(out["correct"]), float(out["examples"])) == (1.0, 2.0)  # row 1's top is wrong
  expected = sk.log_loss(labels[:2].ravel(), 1 / (1 + np.exp(-logits[:2].ravel())),
                         normalize=False)
  assert float(out["loss_sum"]) == pytest.approx(expected, rel=1e-5)
  np.testing.assert_allclose(out["rows"]["scores"], 1 / (1 + np.exp(-logits)), rtol=1e-6)
  assert out["rows"]["labels"].tolist() == labels.tolist()
