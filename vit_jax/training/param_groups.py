"""Per-parameter learning rates and frozen parameters, from the config.

Fine-tuning controls of the field, applied inside the optax chain (vit_jax.training.optim):
  layer_decay  BEiT / timm layer-wise decay over the blocks of the model's family
               (TrainingRules.blocks): block i (0-based) trains at base * decay **
               (num_layers - i), what precedes the blocks (a ViT's patch embedding, class
               token, position embedding, hybrid stem, mpp's mask token) at decay **
               (num_layers + 1), what follows them (TrainingRules.head_side: a ViT's final
               norm, pre_logits and heads) at 1.
               Stacked blocks (scan_layers) get one multiplier per slice of depth.
  lr_mults     (regex, multiplier) pairs over '/'-joined parameter paths (parameters.txt's
               names); the first that matches wins; multiplied with the layer decay.
  freeze       a regex: matching parameters are not updated and carry no optimizer state,
  freeze_steps ... unless this many steps are set: then they train from that step on
               (linear probe, then fine-tune: LP-FT), their state untouched until then.
A regex that matches no parameter is refused in one line naming it.
"""

import math
import re
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import jax
import ml_collections
import numpy as np
import optax

from vit_jax.base import errors
from vit_jax.models.family_contract import TrainingRules
from vit_jax.training import param_rules, sharding

TRAIN, FROZEN, LATER = "train", "frozen", "frozen_until_step"  # optimizer group labels


def named_leaves(params) -> List[Tuple[str, Any]]:
  return [(sharding.path_name(path), leaf)
          for path, leaf in jax.tree_util.tree_leaves_with_path(params)]


def lr_mult_pairs(config: ml_collections.ConfigDict) -> List[Tuple[str, float]]:
  """config.lr_mults as ordered (regex, multiplier) pairs (a mapping keeps its order)."""
  mults = config.get("lr_mults") or ()
  pairs = list(mults.items()) if isinstance(mults, Mapping) else list(mults)
  for pair in pairs:
    if len(pair) != 2 or not isinstance(pair[1], (int, float)):
      raise errors.InvalidInput(f"config.lr_mults entry {pair!r} is not a (regex, multiplier) "
                                "pair: write e.g. (('head', 10.0), ('embedding', 0.1))")
  return [(str(regex), float(mult)) for regex, mult in pairs]


def freeze_regex(config: ml_collections.ConfigDict) -> str:
  return config.get("freeze") or ""


def is_active(config: ml_collections.ConfigDict) -> bool:
  """False when every parameter trains at the base rate: the optimizer is the plain chain."""
  return (config.get("layer_decay", 1.0) != 1.0 or bool(lr_mult_pairs(config))
          or bool(freeze_regex(config)))


def _compile(regex: str, key: str) -> re.Pattern:
  try:
    return re.compile(regex)
  except re.error as e:
    raise errors.InvalidInput(f"config.{key}={regex!r} is not a regular expression ({e})") from None


def check(config: ml_collections.ConfigDict) -> None:
  """Settings refused before any data is read (regexes are checked against the params
  when the optimizer is built, see check_matches)."""
  decay = config.get("layer_decay", 1.0)
  if not isinstance(decay, (int, float)) or not 0 < decay <= 1:
    raise errors.InvalidInput(f"config.layer_decay={decay!r} must be in (0, 1] (1 = off; "
                              "0.65-0.85 is usual)")
  for regex, mult in lr_mult_pairs(config):
    _compile(regex, "lr_mults")
    if not 0 <= mult < math.inf:  # nan and inf diverged at the first step
      raise errors.InvalidInput(f"config.lr_mults[{regex!r}]={mult} must be >= 0 and finite "
                                "(freeze parameters with config.freeze)")
  _compile(freeze_regex(config), "freeze")
  steps = config.get("freeze_steps")
  if steps is not None and (not freeze_regex(config) or not isinstance(steps, int)
                            or steps < 1):
    raise errors.InvalidInput(f"config.freeze_steps={steps!r} needs config.freeze set and "
                              "must be a whole number >= 1 (None: frozen for the whole run)")
  check_unfreezes(config)


def check_unfreezes(config: ml_collections.ConfigDict) -> None:
  """freeze_steps at or past the run's end would never unfreeze: LP-FT that is only the LP,
  with the optimizer state of the later phase held for nothing. Checked again once the
  HyperRule has set total_steps (beside vit_jax.base.config_checks.check_warmup_fits)."""
  steps, total = config.get("freeze_steps"), config.total_steps
  if steps is not None and total > 0 and steps >= total:
    raise errors.InvalidInput(
        f"config.freeze_steps={steps} is not below config.total_steps={total}: the frozen "
        "parameters would never train; lower it, or leave freeze_steps out to freeze them "
        "for the whole run")


def check_matches(names: Sequence[str], regex: str, key: str) -> None:
  """A regex that matches no parameter path is a typo: one line with a few real paths."""
  pattern = _compile(regex, key)
  if not any(pattern.search(name) for name in names):
    examples = ", ".join(names[i] for i in np.linspace(0, len(names) - 1, 4).astype(int))
    raise errors.InvalidInput(f"config.{key}={regex!r} matches no parameter; paths look like "
                              f"{examples} (see parameters.txt)")


def block_index(rules: TrainingRules, name: str) -> Optional[int]:
  """The index of the (unstacked) block a parameter is in, None outside the blocks."""
  block = re.match(rf"{rules.blocks}_(\d+)/", name)
  return int(block.group(1)) if block else None


def depth(name: str, layers: int, rules: TrainingRules) -> Optional[int]:
  """BEiT's layer id: 0 embeddings, i + 1 block i, layers + 1 the head side; None
  for stacked blocks (their id varies along the leading axis)."""
  if re.search(rules.head_side, name):
    return layers + 1
  if param_rules.is_stacked(rules, name):
    return None
  block = block_index(rules, name)
  return block + 1 if block is not None else 0


def multiplier(name: str, shape: Tuple[int, ...], config: ml_collections.ConfigDict,
               rules: Optional[TrainingRules], layers: int):
  """The learning-rate multiplier of one parameter: a float, or for stacked blocks under
  layer decay an array broadcasting over the leading depth axis. rules: the family's
  (None without layer decay, which alone needs them)."""
  decay = float(config.get("layer_decay", 1.0))
  mult = next((m for regex, m in lr_mult_pairs(config) if re.search(regex, name)), 1.0)
  if decay == 1.0:
    return mult
  layer = depth(name, layers, rules)
  if layer is None:
    per_block = decay ** (layers - np.arange(shape[0], dtype=np.float64))
    return (mult * per_block).astype(np.float32).reshape((-1,) + (1,) * (len(shape) - 1))
  return mult * decay ** (layers + 1 - layer)


def num_layers(params, rules: TrainingRules) -> int:
  """The number of blocks, read from the parameter names (or the stacked blocks' shape)."""
  depths = [0]
  for name, leaf in named_leaves(params):
    block = block_index(rules, name)
    depths.append(block + 1 if block is not None else
                  leaf.shape[0] if param_rules.is_stacked(rules, name) else 0)
  return max(depths)


def multipliers(params, config: ml_collections.ConfigDict):
  """The tree of multipliers (floats, or arrays for stacked blocks)."""
  for regex, _ in lr_mult_pairs(config):
    check_matches([name for name, _ in named_leaves(params)], regex, "lr_mults")
  rules = (param_rules.of_params(params) if float(config.get("layer_decay", 1.0)) != 1.0
           else None)
  layers = num_layers(params, rules) if rules else 0
  return jax.tree_util.tree_map_with_path(
      lambda path, leaf: multiplier(sharding.path_name(path), leaf.shape, config, rules,
                                    layers), params)


def labels(params, config: ml_collections.ConfigDict, trained_regex: str = ""):
  """The optimizer group of each parameter: TRAIN, FROZEN or LATER (see freeze_steps).
  `trained_regex` (LoRA: adapters and head) freezes everything it does not match."""
  frozen = freeze_regex(config)
  names = [name for name, _ in named_leaves(params)]
  if frozen:
    check_matches(names, frozen, "freeze")
  group = LATER if config.get("freeze_steps") is not None else FROZEN

  def label(path, _):
    name = sharding.path_name(path)
    if trained_regex and not re.search(trained_regex, name):
      return FROZEN
    return group if frozen and re.search(frozen, name) else TRAIN
  groups = jax.tree_util.tree_map_with_path(label, params)
  if frozen and set(jax.tree.leaves(groups)) == {FROZEN}:  # would end well, learning nothing
    trained = " LoRA would train" if trained_regex else ""
    raise errors.InvalidInput(
        f"config.freeze={frozen!r} freezes every parameter{trained}: nothing would train; "
        "narrow it (a linear probe freezes all but the head: '^(?!head/)')")
  return groups


def scale_by_multipliers(config: ml_collections.ConfigDict) -> optax.GradientTransformation:
  """Stateless: each update times its parameter's multiplier (the last link of the chain,
  so the step is exactly mult times the undecayed one). Its init checks the lr_mults
  regexes: the state is made before a run writes its workdir, the first update after."""
  def init(params):
    names = [name for name, _ in named_leaves(params)]
    for regex, _ in lr_mult_pairs(config):
      check_matches(names, regex, "lr_mults")
    return optax.EmptyState()

  def scale(updates, state, params=None):
    del params
    return jax.tree.map(lambda u, m: u if isinstance(m, float) and m == 1.0
                        else (u * m).astype(u.dtype), updates,
                        multipliers(updates, config)), state
  return optax.GradientTransformation(init, scale)


def partitioned(inner: optax.GradientTransformation, group_labels,
                freeze_steps: Optional[int]) -> optax.GradientTransformation:
  """`inner` on the TRAIN group; FROZEN updates are zero with no state; LATER runs its own
  copy of `inner` from step freeze_steps on (zero updates, state unchanged before)."""
  transforms = {TRAIN: inner, FROZEN: optax.set_to_zero()}
  if freeze_steps is not None:
    transforms[LATER] = optax.transforms.conditionally_mask(
        inner, lambda step: step >= freeze_steps)
  return optax.multi_transform(transforms, group_labels)


def _format(mult) -> str:
  if isinstance(mult, float):
    return f"{mult:.4g}"
  return f"{float(np.min(mult)):.4g}..{float(np.max(mult)):.4g}"  # stacked blocks


def table_columns(params, config: ml_collections.ConfigDict,
                  trained_regex: str = "") -> Dict[str, Dict[str, str]]:
  """parameters.txt's extra columns: {'lr_mult': {path: x}, 'trains': {path: yes|no|from
  step N}}."""
  mults = {name: _format(m) for name, m in named_leaves(multipliers(params, config))}
  steps = config.get("freeze_steps")
  words = {TRAIN: "yes", FROZEN: "no", LATER: f"from step {steps}"}
  group_labels = labels(params, config, trained_regex)
  return {"lr_mult": mults,
          "trains": {name: words[label] for name, label in named_leaves(group_labels)}}


def without_frozen_gradients(batch_loss, config: ml_collections.ConfigDict,
                             trained_regex: str = ""):
  """batch_loss with stop_gradient on the parameters frozen for the whole run, so that no
  backward pass is computed for them (a linear probe differentiates the head only); the
  loss itself is unchanged. Parameters frozen until freeze_steps keep their gradients."""
  if not (freeze_regex(config) or trained_regex):
    return batch_loss

  def loss(params, batch, key):
    group_labels = labels(params, config, trained_regex)
    params = jax.tree.map(lambda p, label: jax.lax.stop_gradient(p) if label == FROZEN else p,
                          params, group_labels)
    return batch_loss(params, batch, key)
  return loss


def trained_summary(columns: Dict[str, Dict[str, str]], params, opt_state) -> str:
  """'N of M parameters train; optimizer state B bytes' (from table_columns)."""
  sizes = {name: int(np.prod(leaf.shape)) for name, leaf in named_leaves(params)}
  trained = sum(size for name, size in sizes.items() if columns["trains"][name] != "no")
  state_bytes = sum(leaf.size * leaf.dtype.itemsize for leaf in jax.tree.leaves(opt_state))
  return (f"{trained:,} of {sum(sizes.values()):,} parameters train; optimizer state "
          f"{state_bytes:,} bytes")
