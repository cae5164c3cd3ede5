"""Supervised classification, `config.objective = "classification"` (the default): the
VisionTransformer fine-tuned or pre-trained on the dataset's labels.

Keys read: loss ('auto' | 'softmax_xent' | 'sigmoid_xent'), label_smoothing, class_weights,
pretrained (a released or local checkpoint to start from), model_name and model.* (the
architecture).
"""

import math
from typing import Any, Callable, Dict, Optional, Tuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax

from vit_jax.base import config_checks, errors
from vit_jax.base.console import log
from vit_jax.checkpoints import hub, npz
from vit_jax.families.vit import model as vit
from vit_jax.models import model_config

Metrics = Dict[str, jax.Array]


def targets(labels: jax.Array, num_classes: int) -> jax.Array:
  """[B, K] float targets from int class ids [B] or soft / one-hot targets [B, K] (mixup)."""
  if labels.ndim == 1:
    return jax.nn.one_hot(labels, num_classes, dtype=jnp.float32)
  return labels.astype(jnp.float32)


def softmax_xent(logits: jax.Array, target: jax.Array) -> jax.Array:
  """Per-example cross-entropy of the softmax against [B, K] targets."""
  return optax.softmax_cross_entropy(logits, target)


def sigmoid_xent(logits: jax.Array, target: jax.Array) -> jax.Array:
  """Per-example sum over classes of independent binary cross-entropies (i21k pre-training)."""
  return jnp.sum(optax.sigmoid_binary_cross_entropy(logits, target), axis=-1)


_LOSSES = {"softmax_xent": softmax_xent, "sigmoid_xent": sigmoid_xent}
# config.loss = 'auto' (the default): sigmoid_xent for multi-label data (one binary
# cross-entropy per class: the labels are not one distribution), else softmax_xent.
AUTO = "auto"


def loss_name(config: ml_collections.ConfigDict, multi_label: bool = False) -> str:
  """The loss config.loss means for single- or multi-label data."""
  if config.loss != AUTO:
    return config.loss
  return "sigmoid_xent" if multi_label else "softmax_xent"


def weighted_softmax_xent(logits: jax.Array, target: jax.Array,
                          weights: jax.Array) -> jax.Array:
  """softmax_xent with each example weighted by its classes' weights (the target-weighted
  mean: w[label] for a class id; an example without any label weighs 1)."""
  total = jnp.sum(target, axis=-1)
  weight = jnp.where(total > 0, target @ weights / jnp.where(total > 0, total, 1.0), 1.0)
  return weight * softmax_xent(logits, target)


def weighted_sigmoid_xent(logits: jax.Array, target: jax.Array,
                          weights: jax.Array) -> jax.Array:
  """sigmoid_xent with class c's positive term weighted by weights[c] (its negatives by 1):
  an example of a rare class counts more, as in the softmax case."""
  per_class = -(weights * target * jax.nn.log_sigmoid(logits)
                + (1.0 - target) * jax.nn.log_sigmoid(-logits))
  return jnp.sum(per_class, axis=-1)


_WEIGHTED = {"softmax_xent": weighted_softmax_xent, "sigmoid_xent": weighted_sigmoid_xent}


def balanced_weights(class_counts) -> list:
  """scikit-learn's 'balanced' class weights, n / (K * count of class c), from the train
  split's per-class example counts (positives, for multi-label data); a class without
  examples weighs 1 (it never is a label)."""
  counts = np.asarray(class_counts, np.float64)
  total = float(counts.sum()) if counts.ndim else 0.0
  return [float(total / (len(counts) * c)) if c > 0 else 1.0 for c in counts]


def check_class_weights(config: ml_collections.ConfigDict,
                        num_classes: Optional[int] = None) -> None:
  """config.class_weights: None, 'balanced' or one positive number per class."""
  weights = config.get("class_weights")
  if weights is None or weights == "balanced":
    return
  if not isinstance(weights, (list, tuple)) or not all(
      isinstance(w, (int, float)) and not isinstance(w, bool) and 0 <= w < math.inf
      for w in weights):
    raise errors.InvalidInput(
        f"config.class_weights={weights!r}: give 'balanced' or a list of finite numbers "
        ">= 0, one per class (None: unweighted)")
  if weights and not any(weights):
    raise errors.InvalidInput(
        f"config.class_weights={weights!r} are all 0: every loss would be 0 and nothing would "
        "train; weigh the classes to learn > 0 (None: unweighted)")
  if num_classes is not None and len(weights) != num_classes:
    raise errors.InvalidInput(
        f"config.class_weights has {len(weights)} weights but the dataset has {num_classes} "
        "classes; give one per class, in class order (or 'balanced')")


def check_label_information(info) -> None:
  """Multi-label data whose every train image carries every label has nothing to learn
  (and scores mAP 1.0 on the same kind of eval data): refused. A label on every train
  image is learned as a constant, its AP telling nothing: warned, naming it."""
  counts = info.train_class_counts
  if not info.multi_label or counts is None or not info.num_train:
    return
  always = [name for name, count in zip(info.class_names, counts) if count == info.num_train]
  shown = ", ".join(repr(name) for name in always[:4]) + (
      f" (+{len(always) - 4} more)" if len(always) > 4 else "")
  if len(always) == len(counts):
    raise errors.InvalidInput(
        f"every one of the {info.num_train} training images carries every label ({shown}): "
        "there is nothing to learn and mAP would be 1.0 by construction; label each image "
        "with the labels it shows")
  if always:
    log.warning("label(s) %s are on every one of the %d training images: the model learns "
                "them as always present, and their AP (in mAP) tells nothing; drop them or "
                "add images without them", shown, info.num_train)


def resolve(config: ml_collections.ConfigDict, info) -> None:
  """Fills in, in place, what the loss settings mean for the data (`info`:
  datasets.DatasetInfo): loss='auto' by the kind of labels, class_weights='balanced' from
  the train split's class counts; a weight list of the wrong length, or labels with
  nothing to learn (check_label_information), are refused."""
  check_label_information(info)
  with config.unlocked():
    if config.loss == AUTO:
      config.loss = loss_name(config, info.multi_label)
      if info.multi_label:
        log.info("multi-label data: config.loss=auto trains with sigmoid_xent (one binary "
                 "cross-entropy per class); set --config.loss to choose another")
    if config.get("class_weights") == "balanced":
      if info.train_class_counts is None:
        raise errors.InvalidInput(
            "config.class_weights='balanced' needs the train split's class counts, which a "
            "streamed TFDS split does not give without reading it all; pass one weight per "
            "class instead")
      del config["class_weights"]  # a str field: the list replaces it
      config.class_weights = balanced_weights(info.train_class_counts)
      log.info("class_weights='balanced': %.3g to %.3g over %d classes (from %d training "
               "examples)", min(config.class_weights), max(config.class_weights),
               info.num_classes, info.num_train)
  check_class_weights(config, info.num_classes)


def make_loss_fn(config: ml_collections.ConfigDict) -> Callable[[jax.Array, Any], jax.Array]:
  """(logits [B, K], labels) -> per-example losses [B], with the configured smoothing and
  class weights (a list by now: train.resolve_config turns 'balanced' into one).

  Label smoothing mixes the targets (int or soft) with the uniform distribution,
  t <- (1 - s) t + s / K, whichever the loss.
  """
  name = loss_name(config)
  loss = config_checks.config_choice(_LOSSES, "loss", name)
  smoothing = config.label_smoothing
  weights = config.get("class_weights")
  if weights is not None:
    check_class_weights(config)
    weights = jnp.asarray(weights, jnp.float32)

  def loss_fn(logits, labels):
    num_classes = logits.shape[-1]
    target = targets(labels, num_classes)
    if smoothing:
      target = (1.0 - smoothing) * target + smoothing / num_classes
    if weights is not None:
      return _WEIGHTED[name](logits, target, weights)
    return loss(logits, target)

  return loss_fn


def make_batch_loss(model: nn.Module, config: ml_collections.ConfigDict):
  """batch_loss(params, batch, rng) -> the mean of the configured loss over the batch's
  labels; `rng` is the dropout key."""
  loss_fn = make_loss_fn(config)

  def mean_loss(params, batch, rng):
    logits = model.apply({"params": params}, batch["image"], train=True,
                         rngs={"dropout": rng})
    return jnp.mean(loss_fn(logits, batch["label"]))

  return mean_loss


# Up to this many classes the eval step adds up the whole confusion matrix (1000: 4 MB);
# beyond, only its row and column sums and diagonal (recall and precision still follow).
CONFUSION_MAX_CLASSES = 1000


def class_sums(predicted: jax.Array, true: jax.Array, real: jax.Array,
               num_classes: int) -> Metrics:
  """Per-class counts of the real rows: the confusion matrix [true, predicted] (a
  product of one-hot matrices: data-parallel, summed over the batch's shards), or for
  many classes 'class_true', 'class_predicted' and 'class_correct' [K]."""
  weight = real.astype(jnp.float32)[:, None]
  true_hot = jax.nn.one_hot(true, num_classes) * weight
  predicted_hot = jax.nn.one_hot(predicted, num_classes) * weight
  if num_classes <= CONFUSION_MAX_CLASSES:
    return {"confusion": jnp.einsum("bt,bp->tp", true_hot, predicted_hot)}
  return {"class_true": jnp.sum(true_hot, 0), "class_predicted": jnp.sum(predicted_hot, 0),
          "class_correct": jnp.sum(true_hot * predicted_hot, 0)}


def make_eval_step(model: nn.Module):
  """eval_step(params, batch) -> sums over the rows where batch['mask'] is 1.

  Sums (not means) so the caller can add them over batches and hosts and divide once:
  padded rows count nowhere. `loss_sum` is the unsmoothed softmax cross-entropy whatever
  the training loss, so runs with different losses compare; the per-class counts of
  class_sums give recall, precision and the confusion matrix (scores.per_class).
  """
  def eval_step(params, batch) -> Metrics:
    logits = model.apply({"params": params}, batch["image"], train=False)
    num_classes = logits.shape[-1]
    target = targets(batch["label"], num_classes)
    real = batch["mask"] > 0
    predicted, true = jnp.argmax(logits, axis=-1), jnp.argmax(target, axis=-1)
    masked_sum = lambda x: jnp.sum(jnp.where(real, x, 0.0))
    return {"loss_sum": masked_sum(softmax_xent(logits, target)),
            "correct": masked_sum((predicted == true).astype(jnp.float32)),
            "examples": jnp.sum(real, dtype=jnp.float32),
            **class_sums(predicted, true, real, num_classes)}

  return eval_step


class Classification:
  """The objective protocol (vit_jax.training.objectives) for labels."""
  name = "classification"
  predicts_classes = True

  def check(self, config: ml_collections.ConfigDict) -> None:
    """label_smoothing, the loss, class weights and threshold (the model keys are
    model_config's, the optimizer's optim's)."""
    config_checks.check_fraction("config.label_smoothing", config.label_smoothing,
                                 "the share of each target spread over all classes; 0 = off")
    if config.loss != AUTO:
      config_checks.config_choice(_LOSSES, "loss", config.loss)
    check_class_weights(config)
    threshold = config.get("threshold", 0.5)
    if not 0.0 <= threshold <= 1.0:
      raise errors.InvalidInput(f"config.threshold={threshold} must be in [0, 1]: a class is "
                                "predicted at this sigmoid score or above (multi-label data)")

  def create_model(self, config: ml_collections.ConfigDict, num_classes: int, *,
                   load_pretrained: bool) -> Tuple[vit.VisionTransformer, Optional[dict]]:
    """The module, plus host params when starting from config.pretrained."""
    if not load_pretrained:
      return model_config.model_from_config(config, num_classes), None
    return npz.load_npz(hub.resolve(config.pretrained), image_size=config.pp.crop,
                        num_classes=num_classes, model_name=config.model_name,
                        pre_logits=config.model.representation_size is not None,
                        allow_nonfinite=config.get("allow_nonfinite_pretrained", False),
                        **model_config.config_overrides(config))

  def make_batch_loss(self, module, config):
    return make_batch_loss(module, config)

  def make_eval_step(self, module, config):
    del config
    return make_eval_step(module)

  def export_params(self, params):
    return params
