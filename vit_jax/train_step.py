"""Pure train and eval step functions; the caller jits them with shardings and donation.

Keys read: loss ('softmax_xent' | 'sigmoid_xent', default softmax), label_smoothing
(default 0), accum_steps (default 1), and the schedule keys of vit_jax.optim (for the
`lr` metric).
"""

from typing import Any, Callable, Dict

import flax
import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import optax

from vit_jax import errors, optim

Metrics = Dict[str, jax.Array]


@flax.struct.dataclass
class TrainState:
  """Everything a checkpoint must hold to resume training exactly. `polyak` is the
  exponential moving average of `params` (None when config.polyak_decay is 0)."""
  step: jax.Array
  params: Any
  opt_state: Any
  polyak: Any = None

  @property
  def eval_params(self):
    """What is evaluated and exported: the average when there is one (paper, 4.1)."""
    return self.params if self.polyak is None else self.polyak


def create_train_state(params, optimizer: optax.GradientTransformation, *,
                       polyak: bool = False) -> TrainState:
  """The state at step 0; the Polyak average, if kept, starts at the initial params."""
  return TrainState(step=jnp.zeros((), jnp.int32), params=params,
                    opt_state=optimizer.init(params),
                    polyak=jax.tree.map(jnp.copy, params) if polyak else None)


def polyak_update(average, params, decay: float):
  """average <- decay * average + (1 - decay) * params, leaf by leaf."""
  return jax.tree.map(lambda a, p: decay * a + (1.0 - decay) * p, average, params)


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
  loss = optim.config_choice(_LOSSES, "loss", config.get("loss", "softmax_xent"))
  smoothing = config.get("label_smoothing", 0.0)

  def loss_fn(logits, labels):
    num_classes = logits.shape[-1]
    target = targets(labels, num_classes)
    if smoothing:
      target = (1.0 - smoothing) * target + smoothing / num_classes
    return loss(logits, target)

  return loss_fn


def split_micro_batches(tree, accum_steps: int):
  """[B, ...] leaves -> [accum_steps, B / accum_steps, ...]; micro-batch i holds rows i::k.

  Strided, not contiguous: with B sharded over devices, each micro-batch then takes an
  equal slice of every device's shard (the reference code split the per-device batch)
  and stays data-parallel. Contiguous rows would put a micro-batch on a single device,
  and XLA would all-gather the batch and compute all of it on every device.
  """
  def split(x):
    if x.shape[0] % accum_steps:
      raise errors.InvalidInput(
          f"a batch of {x.shape[0]} examples does not split into "
          f"config.accum_steps={accum_steps} equal micro-batches")
    return jnp.swapaxes(x.reshape(x.shape[0] // accum_steps, accum_steps, *x.shape[1:]), 0, 1)

  return jax.tree.map(split, tree)


def accumulate_gradients(loss_and_grad, params, micro_batches, rng):
  """Mean loss and gradients over the leading micro-batch axis, one micro-batch in memory.

  Equal micro-batch sizes make the mean of the micro-batch means the big-batch mean.
  Each micro-batch gets its own dropout key: fold_in(rng, index).
  """
  num_micro = jax.tree.leaves(micro_batches)[0].shape[0]
  if num_micro == 1:  # no loop: saves zeroing and adding a gradient-sized buffer
    return loss_and_grad(params, jax.tree.map(lambda x: x[0], micro_batches),
                         jax.random.fold_in(rng, 0))

  def add_one(total, indexed):
    index, micro_batch = indexed
    value = loss_and_grad(params, micro_batch, jax.random.fold_in(rng, index))
    return jax.tree.map(jnp.add, total, value), None

  zeros = (jnp.zeros((), jnp.float32), jax.tree.map(jnp.zeros_like, params))
  total, _ = jax.lax.scan(add_one, zeros, (jnp.arange(num_micro), micro_batches))
  return jax.tree.map(lambda x: x / num_micro, total)


def classification_loss(model: nn.Module, config: ml_collections.ConfigDict):
  """batch_loss(params, batch, rng) -> the mean of the configured loss over the batch's
  labels; `rng` is the dropout key."""
  loss_fn = make_loss_fn(config)

  def mean_loss(params, batch, rng):
    logits = model.apply({"params": params}, batch["image"], train=True,
                         rngs={"dropout": rng})
    return jnp.mean(loss_fn(logits, batch["label"]))

  return mean_loss


def make_train_step(model: nn.Module, optimizer: optax.GradientTransformation,
                    config: ml_collections.ConfigDict, batch_loss=None):
  """train_step(state, batch, rng) -> (state, metrics) for batch {'image', 'label'}.

  `rng` may stay the same every step: the key of a micro-batch is
  fold_in(fold_in(rng, state.step), micro-batch index).
  metrics: `loss` (batch mean), `grad_norm` (of the mean gradient, before clipping),
  `lr` (the schedule's value used by this update).
  batch_loss(params, micro_batch, key) -> scalar mean loss is what is minimised; default
  classification_loss(model, config). Other objectives (vit_jax.objectives) pass theirs.
  """
  if batch_loss is None:
    batch_loss = classification_loss(model, config)
  schedule = optim.make_schedule(config)
  accum_steps = config.get("accum_steps", 1)
  loss_and_grad = jax.value_and_grad(batch_loss)

  def train_step(state: TrainState, batch, rng):
    micro_batches = split_micro_batches(
        {"image": batch["image"], "label": batch["label"]}, accum_steps)
    loss, grads = accumulate_gradients(loss_and_grad, state.params, micro_batches,
                                       jax.random.fold_in(rng, state.step))
    updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
    params = optax.apply_updates(state.params, updates)
    polyak = (None if state.polyak is None
              else polyak_update(state.polyak, params, config.get("polyak_decay", 0.0)))
    new_state = state.replace(step=state.step + 1, opt_state=opt_state, params=params,
                              polyak=polyak)
    metrics = {"loss": loss, "grad_norm": optax.tree.norm(grads),
               "lr": schedule(state.step)}
    return new_state, metrics

  return train_step


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
