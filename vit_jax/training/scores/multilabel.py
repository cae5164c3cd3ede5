"""Multi-label evaluation: mean average precision and F1 over the whole split.

Average precision ranks examples by score, so it cannot be summed batch by batch like
accuracy: the eval step hands back each real row's sigmoid scores and multi-hot labels,
replicated over the devices (every process sees the whole global batch: each host's rows
exactly once), and the rows where the mask is 0 (padding) are dropped on the host. The
numbers are then computed once, from every example of the split:

  * eval/map: the mean over the classes that have positives of their average precision,
    AP = sum over distinct score thresholds of (R_n - R_n-1) P_n (scikit-learn's
    average_precision_score; tied scores form one threshold);
  * eval/f1_micro, eval/f1_macro: F1 with a class predicted when its score is at least
    config.threshold (micro: over all example-class pairs; macro: the mean over all
    classes, 0 for a class with nothing to score, as scikit-learn's f1_score with
    zero_division=0);
  * eval/accuracy: the share of examples whose top-scoring class is one of their labels;
    eval/loss: the sigmoid cross-entropy, summed over classes.
"""

from typing import Dict, List, Sequence, Tuple

import jax
import jax.numpy as jnp
import numpy as np

from vit_jax.training.scores.per_class import ClassReport

DEFAULT_THRESHOLD = 0.5


def make_eval_step(model):
  """eval_step(params, batch) -> loss and top-1 sums over the real rows, plus 'rows':
  {'scores' [B, K] sigmoid, 'labels' [B, K] int8, 'mask' [B]} for the host."""
  def eval_step(params, batch):
    logits = model.apply({"params": params}, batch["image"], train=False)
    labels = batch["label"].astype(jnp.float32)
    real = batch["mask"] > 0
    masked_sum = lambda x: jnp.sum(jnp.where(real, x, 0.0))
    top1 = jnp.argmax(logits, axis=-1)
    hit = jnp.take_along_axis(labels, top1[:, None], axis=-1)[:, 0] > 0
    per_class = (jax.nn.log_sigmoid(logits) * labels
                 + jax.nn.log_sigmoid(-logits) * (1.0 - labels))
    return {"loss_sum": masked_sum(-jnp.sum(per_class, axis=-1)),
            "correct": masked_sum(hit.astype(jnp.float32)),
            "examples": jnp.sum(real, dtype=jnp.float32),
            "rows": {"scores": jax.nn.sigmoid(logits.astype(jnp.float32)),
                     "labels": batch["label"].astype(jnp.int8), "mask": batch["mask"]}}
  return eval_step


def real_rows(batches: Sequence[Dict[str, np.ndarray]]) -> Tuple[np.ndarray, np.ndarray]:
  """(scores [N, K], labels bool [N, K]) of the rows whose mask is 1, in batch order."""
  keep = [batch["mask"] > 0 for batch in batches]
  scores = np.concatenate([b["scores"][k] for b, k in zip(batches, keep)])
  labels = np.concatenate([b["labels"][k] for b, k in zip(batches, keep)]) > 0
  return scores, labels


def average_precision(scores: np.ndarray, labels: np.ndarray) -> np.ndarray:
  """Per-class AP [K] of scores [N, K] against labels bool [N, K] (NaN without positives).

  Sorted by score, each tie group is one threshold; a positive adds precision at the end
  of its tie group / P, which is sum_n (R_n - R_n-1) P_n."""
  num = len(scores)
  order = np.argsort(-scores, axis=0, kind="stable")
  ranked = np.take_along_axis(scores, order, axis=0)
  hits = np.take_along_axis(labels, order, axis=0)
  true_pos = np.cumsum(hits, axis=0)
  precision = true_pos / np.arange(1, num + 1)[:, None]
  group_end = np.ones_like(ranked, bool)
  group_end[:-1] = ranked[1:] != ranked[:-1]
  end_index = np.where(group_end, np.arange(num)[:, None], num)
  end_index = np.minimum.accumulate(end_index[::-1], axis=0)[::-1]
  at_end = np.take_along_axis(precision, end_index, axis=0)
  positives = labels.sum(axis=0)
  with np.errstate(invalid="ignore", divide="ignore"):
    return np.where(positives > 0, (hits * at_end).sum(axis=0) / positives, np.nan)


def f1_scores(predicted: np.ndarray, labels: np.ndarray) -> Tuple[float, np.ndarray]:
  """(micro F1, per-class F1 [K]) of boolean predictions; 0 where nothing is scored."""
  true_pos = (predicted & labels).sum(axis=0).astype(np.float64)
  wrong = (predicted ^ labels).sum(axis=0)  # false positives + false negatives
  denominator = 2 * true_pos + wrong
  per_class = np.divide(2 * true_pos, denominator, out=np.zeros_like(true_pos),
                        where=denominator > 0)
  total = 2 * true_pos.sum() + wrong.sum()
  return (float(2 * true_pos.sum() / total) if total else 0.0), per_class


def summarize(batches: List[Dict[str, np.ndarray]], class_names: Sequence[str],
              threshold: float = DEFAULT_THRESHOLD) -> Tuple[Dict[str, float], ClassReport]:
  """({'map', 'f1_micro', 'f1_macro'}, per-class AP, F1 and positives) of a split's rows."""
  scores, labels = real_rows(batches)
  ap = average_precision(scores, labels)
  micro, per_class_f1 = f1_scores(scores >= threshold, labels)
  has_positives = ~np.isnan(ap)
  scalars = {"map": float(np.mean(ap[has_positives])) if has_positives.any() else float("nan"),
             "f1_micro": micro, "f1_macro": float(np.mean(per_class_f1))}
  report = ClassReport(list(class_names), {"ap": ap, "f1": per_class_f1,
                                           "positives": labels.sum(axis=0).astype(np.int64)},
                       "ap")
  return scalars, report
