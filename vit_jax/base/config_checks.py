"""Config values that cannot work, refused before anything slow runs or anything is written.

A zero or negative count used to surface late (`checkpoint_every=0` after a 23 s compile)
or not at all (`total_steps=0` "succeeded" with an untrained params.npz), so each owner of a
key (optim, train_step, the model zoo, the pipeline, ...) checks it first, with one line
naming the key and the fix. Here: the rules they share (a named choice, a fraction) and the
run's own keys (counts, seed, "no pretrained checkpoint"), which only the loop reads.
"""

from typing import Mapping, Sequence, Union

import ml_collections

from vit_jax.base import errors

# Counts that must be >= 1. total_steps may also be -1 (BiT HyperRule from the data size).
POSITIVE_COUNTS = ("batch", "batch_eval", "accum_steps", "checkpoint_every", "eval_every",
                   "progress_every", "keep_checkpoints")
HYPERRULE = -1
DTYPES = ("float32", "bfloat16")


def _is_int(value) -> bool:
  return isinstance(value, int) and not isinstance(value, bool)


def check_counts(config: ml_collections.ConfigDict) -> None:
  """Raises ValueError for a count out of range (total_steps == -1 is resolved later)."""
  for key in POSITIVE_COUNTS:
    value = config[key]
    if not _is_int(value) or value < 1:
      raise errors.InvalidInput(f"config.{key}={value!r} must be a whole number >= 1")
  total = config.total_steps
  if not _is_int(total) or (total < 1 and total != HYPERRULE):
    raise errors.InvalidInput(
        f"config.total_steps={total!r} must be >= 1 (or -1 for BiT's HyperRule "
        "length from the training set size)")
  warmup = config.warmup_steps
  if not _is_int(warmup) or warmup < 0 or (total != HYPERRULE and warmup > total):
    limit = "" if total == HYPERRULE else f" and <= config.total_steps={total}"
    raise errors.InvalidInput(f"config.warmup_steps={warmup!r} must be >= 0{limit}")


def check_warmup_fits(config: ml_collections.ConfigDict) -> None:
  """After total_steps=-1 is resolved: warm-up cannot be longer than the run."""
  if config.warmup_steps > config.total_steps:
    raise errors.InvalidInput(
        f"config.warmup_steps={config.warmup_steps} is longer than the run "
        f"(total_steps={config.total_steps} from BiT's HyperRule): lower it or "
        "set config.total_steps")


def check_fraction(name: str, value, hint: str) -> None:
  """A probability or decay in [0, 1): at 1 or more it trains on and learns nothing (dropout
  1.5 gave chance accuracy, label smoothing 2.0 below chance); `hint` says what 0 means."""
  number = isinstance(value, (int, float)) and not isinstance(value, bool)
  if not (number and 0.0 <= value < 1.0):
    raise errors.InvalidInput(f"{name}={value!r} must be in [0, 1): {hint}")


def check_model_options(num_classes, kwargs: dict) -> None:
  """Values that used to fail deep in JAX (num_classes='10') or train on silently without
  learning (dropout_rate=1.5), whatever the model family: one line naming the option."""
  if not isinstance(num_classes, int) or isinstance(num_classes, bool) or num_classes < 0:
    raise errors.InvalidInput(f"num_classes={num_classes!r} must be a whole number: the "
                              "size of the classification head (0: a model without one)")
  for key in ("dropout_rate", "attention_dropout_rate"):
    check_fraction(key, kwargs.get(key, 0.0), "the share of activations "
                   "zeroed in training; 0 = off, the paper used 0.1 for L and H")
  check_fraction("stochastic_depth", kwargs.get("stochastic_depth", 0.0),
                 "the last block's drop rate in training; 0 = off, AugReg "
                 "used 0.1 (the names' sd_0.1)")


def config_choice(table: Union[Mapping, Sequence[str]], key: str, value):
  """table[value] for config.<key> = value (`value` itself where `table` is a list of
  names), or a one-line error naming the choices: a name that would otherwise fail deep
  inside model, loss or optimizer code."""
  if value not in table:
    raise errors.InvalidInput(f"unknown config.{key}={value!r}; choose one of {', '.join(table)}")
  return table[value] if isinstance(table, Mapping) else value


# What a command line can say for "no pretrained checkpoint": absl passes the text on.
NO_CHECKPOINT = ("", "None", "none")


def normalize(config: ml_collections.ConfigDict) -> None:
  """--config.pretrained=None (or empty) means from scratch, not a file named 'None'."""
  if config.get("pretrained") in NO_CHECKPOINT:
    config.pretrained = None


def check_seed(config: ml_collections.ConfigDict) -> None:
  """tf.data's and JAX's seeds are unsigned: a negative one failed deep inside them."""
  if not _is_int(config.seed) or config.seed < 0:
    raise errors.InvalidInput(f"config.seed={config.seed!r} must be a whole number >= 0")


def check(config: ml_collections.ConfigDict) -> None:
  """The run's own keys: its counts and its seed."""
  check_counts(config)
  check_seed(config)
