"""The generic train step: any objective's batch loss, gradient accumulation, the optimizer
and the Polyak average. Pure; vit_jax.training.state_and_step jits it with shardings and donation.

Keys read: accum_steps, polyak_decay (when the state keeps an average), and the schedule
keys of vit_jax.training.optim (for the `lr` metric).
"""

from typing import Any, Callable, Optional

import flax
import jax
import jax.numpy as jnp
import ml_collections
import optax

from vit_jax.base import config_checks, errors
from vit_jax.training import optim


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


def check(config: ml_collections.ConfigDict) -> None:
  """A Polyak decay of 1 or more never moves the average off the initial params."""
  config_checks.check_fraction("config.polyak_decay", config.get("polyak_decay", 0.0),
                               "0 turns Polyak averaging off, the paper used 0.9999")


def polyak_update(average, params, decay: float):
  """average <- decay * average + (1 - decay) * params, leaf by leaf."""
  return jax.tree.map(lambda a, p: decay * a + (1.0 - decay) * p, average, params)


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


def make_train_step(batch_loss: Callable, optimizer: optax.GradientTransformation,
                    config: ml_collections.ConfigDict,
                    schedule: Optional[optax.Schedule] = None):
  """train_step(state, batch, rng) -> (state, metrics) for batch {'image', 'label', ...}
  (an objective's inputs: contrastive batches add 'text').

  batch_loss(params, micro_batch, key) -> scalar mean loss is what is minimised (an
  objective's make_batch_loss, vit_jax.training.objectives), over config.accum_steps micro-batches;
  the Polyak average, if the state keeps one, moves with config.polyak_decay.
  `rng` may stay the same every step: the key of a micro-batch is
  fold_in(fold_in(rng, state.step), micro-batch index).
  metrics: `loss` (batch mean), `grad_norm` (of the mean gradient, before clipping),
  `lr` (the schedule's value used by this update).
  """
  schedule = schedule or optim.make_schedule(config)  # the optimizer's, when given
  accum_steps = config.accum_steps
  loss_and_grad = jax.value_and_grad(batch_loss)
  apply_gradients = make_apply_gradients(optimizer, config)

  def train_step(state: TrainState, batch, rng):
    micro_batches = split_micro_batches(  # what the loss reads: the eval mask is no input
        {key: value for key, value in batch.items() if key != "mask"}, accum_steps)
    loss, grads = accumulate_gradients(loss_and_grad, state.params, micro_batches,
                                       jax.random.fold_in(rng, state.step))
    metrics = {"loss": loss, "grad_norm": optax.tree.norm(grads),
               "lr": schedule(state.step)}
    return apply_gradients(state, grads), metrics

  return train_step


def make_apply_gradients(optimizer: optax.GradientTransformation,
                         config: ml_collections.ConfigDict) -> Callable:
  """apply_gradients(state, grads) -> the next state: the optimizer, then the Polyak
  average. The part of the step that runs once per step whatever config.accum_steps is
  (vit_jax.planning.compiled_plan compiles it alone to price it apart from the micro-batches)."""
  def apply_gradients(state: TrainState, grads) -> TrainState:
    updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
    params = optax.apply_updates(state.params, updates)
    polyak = (None if state.polyak is None
              else polyak_update(state.polyak, params, config.polyak_decay))
    return state.replace(step=state.step + 1, opt_state=opt_state, params=params,
                         polyak=polyak)

  return apply_gradients
