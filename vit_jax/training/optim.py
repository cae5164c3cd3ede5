"""The optimizer and learning-rate schedule, built from the config as one optax chain.

    clip_by_global_norm -> sgd momentum | adam -> decoupled weight decay -> * -lr(step)

Keys read: optimizer, base_lr, warmup_steps, total_steps, decay_type, linear_end,
momentum (sgd), adam_b1 / adam_b2 (adam, adamw), optim_dtype, weight_decay,
grad_norm_clip; layer_decay, lr_mults, freeze, freeze_steps (see vit_jax.training.param_groups).
Every key must be set (vit_jax/training/config_defaults.py sets the reference fine-tuning recipe)
except `linear_end` (default: the reference code's 1e-5) and the param_groups keys (off).
"""

import math
from typing import Callable, Dict, Optional

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax

from vit_jax.base import config_checks, errors
from vit_jax.training import param_groups

# decay_type -> (scale, offset) of the lr after warm-up, from (base_lr, linear_end), and the
# shape f(progress in [0, 1]) that lr = offset + scale * f(progress) follows.
_DECAYS: Dict[str, tuple[Callable, Callable]] = {
    "cosine": (lambda base, end: (base * 0.5, 0.0), lambda p: 1.0 + jnp.cos(jnp.pi * p)),
    "linear": (lambda base, end: (base - end, end), lambda p: 1.0 - p),
    "constant": (lambda base, end: (base, 0.0), jnp.ones_like),
}

# Names whose leaves get weight decay. Matching by name, not by ndim >= 2: attention
# biases are 2-D (heads, head_dim), and old checkpoints' GroupNorm scales are 4-D, yet
# neither is a kernel; `cls` and `pos_embedding` are 3-D and are not decayed either.
_DECAYED_NAMES = ("kernel",)


def check(config: ml_collections.ConfigDict) -> None:
  """Unknown optimizer, decay or buffer dtype names, and values that train on without
  learning (a negative clip norm reverses every gradient), fail before any data is read."""
  config_checks.config_choice(_OPTIMIZERS, "optimizer", config.optimizer)
  config_checks.config_choice(_DECAYS, "decay_type", config.decay_type)
  config_checks.config_choice(config_checks.DTYPES, "optim_dtype", config.optim_dtype)
  _check_range(config, "base_lr", 0.0, math.inf,
               ">= 0 (0 leaves the weights as they start; the paper fine-tuned with 0.003-0.06)")
  _check_range(config, "grad_norm_clip", 0.0, math.inf,
               "> 0, or 0 / None to turn clipping off (the paper: 1.0)", none_ok=True)
  _check_range(config, "weight_decay", 0.0, math.inf, ">= 0 (0 = off)")
  _check_range(config, "linear_end", 0.0, math.inf, ">= 0")
  for key in ("momentum", "adam_b1", "adam_b2"):
    _check_range(config, key, 0.0, 1.0, "in [0, 1)", high_open=True)


def _check_range(config, key: str, low: float, high: float, rule: str, *, none_ok=False,
                 high_open=False) -> None:
  """config.<key> (if set) a finite number in [low, high] (or [low, high) with high_open),
  or a one-line error with `rule`."""
  if key not in config or (none_ok and config[key] is None):
    return
  value = config[key]
  number = isinstance(value, (int, float)) and not isinstance(value, bool)
  inside = (number and math.isfinite(value) and low <= value
            and (value < high if high_open else value <= high))
  if not inside:
    raise errors.InvalidInput(f"config.{key}={value!r} must be {rule}")


def schedule_numbers(config: ml_collections.ConfigDict) -> dict[str, np.float32]:
  """The numbers of config's schedule (from base_lr, warmup_steps, total_steps, linear_end),
  as float32 scalars. The main job passes them to its compiled train step as arguments, so
  that runs differing only in length or learning rate (a sweep, a longer rerun) share one
  program instead of compiling one each. Combined in float64 first, as Python would fold
  them into the program."""
  scale_and_offset, _ = config_checks.config_choice(_DECAYS, "decay_type", config.decay_type)
  warmup, total = config.warmup_steps, config.total_steps
  scale, offset = scale_and_offset(config.base_lr, config.get("linear_end", 1e-5))
  return {"warmup_steps": np.float32(warmup),
          "decay_steps": np.float32(max(total - warmup, 1)),  # total == warmup: a step at the end
          "scale": np.float32(scale), "offset": np.float32(offset)}


def make_schedule(config: ml_collections.ConfigDict,
                  numbers: dict[str, jax.typing.ArrayLike] | None = None) -> optax.Schedule:
  """The reference code's schedule: linear warm-up times a decay over the remaining steps.

      warm(step) = min(1, step / warmup_steps)           (1 when warmup_steps == 0)
      p(step)    = clip((step - warmup_steps) / (total_steps - warmup_steps), 0, 1)
      cosine:    lr = base_lr * warm * 0.5 * (1 + cos(pi * p))           (-> 0)
      linear:    lr = warm * (linear_end + (base_lr - linear_end) * (1 - p))  (-> linear_end)
      constant:  lr = base_lr * warm

  `numbers`: schedule_numbers(config) (the default), or those numbers as traced arguments of
  a compiled program; only decay_type is then fixed in the program.
  """
  _, shape = config_checks.config_choice(_DECAYS, "decay_type", config.decay_type)
  numbers = schedule_numbers(config) if numbers is None else numbers
  warmup, decay_steps = numbers["warmup_steps"], numbers["decay_steps"]

  def schedule(step):
    step = jnp.asarray(step, jnp.float32)
    progress = jnp.clip((step - warmup) / decay_steps, 0.0, 1.0)
    divisor = jnp.where(warmup > 0, warmup, 1.0)  # no division by 0 without warm-up
    warm = jnp.where(warmup > 0, jnp.minimum(1.0, step / divisor), 1.0)
    return jnp.asarray(warm * (numbers["offset"] + numbers["scale"] * shape(progress)),
                       jnp.float32)

  return schedule


def decay_mask(params) -> dict:
  """True for the leaves that get weight decay: the kernels (see _DECAYED_NAMES)."""
  return jax.tree_util.tree_map_with_path(
      lambda path, _: getattr(path[-1], "key", None) in _DECAYED_NAMES, params)


def _sgd(config, dtype) -> optax.GradientTransformation:
  return optax.trace(decay=config.momentum, accumulator_dtype=dtype)


def _adam(config, dtype) -> optax.GradientTransformation:
  return optax.scale_by_adam(b1=config.adam_b1, b2=config.adam_b2, mu_dtype=dtype)


# 'adam' and 'adamw' build the same chain: the paper's "Adam with weight decay" was
# flax.optim.Adam, whose weight decay is decoupled (AdamW); both names are accepted.
_OPTIMIZERS = {"sgd": _sgd, "adam": _adam, "adamw": _adam}


def make_optimizer(config: ml_collections.ConfigDict, trained_regex: str = "",
                   schedule: Optional[optax.Schedule] = None) -> optax.GradientTransformation:
  """The full update rule; optim_dtype is the momentum / first-moment buffer's dtype.

  Weight decay is decoupled from the gradient statistics but scaled by the schedule
  (update -= lr * weight_decay * kernel), as flax.optim.Adam did for the paper.
  With per-parameter rates or frozen parameters (vit_jax.training.param_groups; `trained_regex`:
  only the parameters it matches train, as LoRA does), frozen gradients are zeroed before
  the clip (its norm is that of what trains), the direction and weight decay run on the
  trained group only, and each update is finally scaled by its parameter's multiplier.
  Without them the chain is exactly the plain one (same state, same numbers).
  """
  direction = config_checks.config_choice(_OPTIMIZERS, "optimizer", config.optimizer)
  clip = [optax.clip_by_global_norm(config.grad_norm_clip)] if config.grad_norm_clip else []
  rule = [direction(config, jnp.dtype(config.optim_dtype))]
  if config.weight_decay:
    rule.append(optax.add_decayed_weights(config.weight_decay, mask=decay_mask))
  learning_rate = optax.scale_by_learning_rate(schedule or make_schedule(config))
  if not (param_groups.is_active(config) or trained_regex):
    return optax.chain(*clip, *rule, learning_rate)
  steps = config.get("freeze_steps")
  if param_groups.freeze_regex(config) or trained_regex:
    labels = lambda params: param_groups.labels(params, config, trained_regex)
    clip.insert(0, param_groups.partitioned(optax.identity(), labels, steps))
    rule = [param_groups.partitioned(optax.chain(*rule), labels, steps)]
  return optax.chain(*clip, *rule, learning_rate, param_groups.scale_by_multipliers(config))
