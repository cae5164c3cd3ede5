"""Supervised classification, `config.objective = "classification"` (the default): the
VisionTransformer fine-tuned or pre-trained on the dataset's labels.

Keys read: loss ('softmax_xent' | 'sigmoid_xent'), label_smoothing, pretrained (a released
or local checkpoint to start from), model_name and model.* (the architecture).
"""

from typing import Any, Callable, Dict, Optional, Tuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import optax

from vit_jax import config_checks, optim
from vit_jax.checkpoints import hub, npz
from vit_jax.models import vit, zoo

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


def make_loss_fn(config: ml_collections.ConfigDict) -> Callable[[jax.Array, Any], jax.Array]:
  """(logits [B, K], labels) -> per-example losses [B], with the configured smoothing.

  Label smoothing mixes the targets (int or soft) with the uniform distribution,
  t <- (1 - s) t + s / K, whichever the loss.
  """
  loss = optim.config_choice(_LOSSES, "loss", config.loss)
  smoothing = config.label_smoothing

  def loss_fn(logits, labels):
    num_classes = logits.shape[-1]
    target = targets(labels, num_classes)
    if smoothing:
      target = (1.0 - smoothing) * target + smoothing / num_classes
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


def make_eval_step(model: nn.Module):
  """eval_step(params, batch) -> sums over the rows where batch['mask'] is 1.

  Sums (not means) so the caller can add them over batches and hosts and divide once:
  padded rows count nowhere. `loss_sum` is the unsmoothed softmax cross-entropy whatever
  the training loss, so runs with different losses compare.
  """
  def eval_step(params, batch) -> Metrics:
    logits = model.apply({"params": params}, batch["image"], train=False)
    target = targets(batch["label"], logits.shape[-1])
    real = batch["mask"] > 0
    correct = jnp.argmax(logits, axis=-1) == jnp.argmax(target, axis=-1)
    masked_sum = lambda x: jnp.sum(jnp.where(real, x, 0.0))
    return {"loss_sum": masked_sum(softmax_xent(logits, target)),
            "correct": masked_sum(correct.astype(jnp.float32)),
            "examples": jnp.sum(real, dtype=jnp.float32)}

  return eval_step


class Classification:
  """The objective protocol (vit_jax.objectives) for labels."""
  name = "classification"
  predicts_classes = True

  def check(self, config: ml_collections.ConfigDict) -> None:
    """label_smoothing here; the model keys are checked by zoo, the optimizer's by optim."""
    config_checks.check_fraction("config.label_smoothing", config.label_smoothing,
                                 "the share of each target spread over all classes; 0 = off")

  def create_model(self, config: ml_collections.ConfigDict, num_classes: int, *,
                   load_pretrained: bool) -> Tuple[vit.VisionTransformer, Optional[dict]]:
    """The module, plus host params when starting from config.pretrained."""
    if not load_pretrained:
      return zoo.model_from_config(config, num_classes), None
    return npz.load_npz(hub.resolve(config.pretrained), image_size=config.pp.crop,
                        num_classes=num_classes, model_name=config.model_name,
                        pre_logits=config.model.representation_size is not None,
                        allow_nonfinite=config.get("allow_nonfinite_pretrained", False),
                        **zoo.config_overrides(config))

  def make_batch_loss(self, module, config):
    return make_batch_loss(module, config)

  def make_eval_step(self, module, config):
    del config
    return make_eval_step(module)

  def export_params(self, params):
    return params
