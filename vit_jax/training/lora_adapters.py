"""LoRA (Hu et al., 2021): frozen base kernels plus trained low-rank adapters.

Each target kernel W (config.lora.targets, a regex over dense kernels) gets two siblings in
the parameter tree: `lora_a` [*W's input dims, rank] (uniform +-1/sqrt(fan_in)) and
`lora_b` [rank, *W's output dims] (zeros, so step 0 is the base model exactly); the model
computes with W + alpha / rank * A @ B. Only the adapters and the head train (and carry
optimizer state, vit_jax.training.param_groups); adapters are sharded like their kernels (the
tensor rules of vit_jax.training.sharding). The adapters are merged into the kernels before every
apply, not added beside the activations: the model code is untouched and params.npz is the
released layout. Only a training apply with config.lora.dropout > 0 computes the adapter
path apart, as the paper does, x W + alpha / rank * dropout(x) A B (each adapted Dense's
call intercepted, flax.linen.intercept_methods); evaluation, predict and params.npz are
the merged model either way, and dropout 0 trains on the merged kernels as before.

At the end of a run params.npz holds the merged weights and adapters.npz (ADAPTERS) the
adapters, the trained head and the settings; merge(base, adapters) rebuilds params.npz's
arrays from the base checkpoint bit for bit (`python -m vit_jax.lora BASE ADAPTERS OUT`).
"""

import dataclasses
import functools
import hashlib
import io
import json
import math
import re
from typing import Any, Dict, Optional, Tuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from flax import traverse_util

from vit_jax.base import config_checks, errors, storage
from vit_jax.checkpoints import npz
from vit_jax.models.family_contract import TrainingRules
from vit_jax.training import param_groups, param_rules

A, B = "lora_a", "lora_b"
ADAPTERS = "adapters.npz"
SETTINGS = npz.LORA_SETTINGS  # adapters.npz's JSON entry
# config.lora.targets' default (a ViT's attention kernels): left so, it means the model
# family's own (targets_of).
DEFAULT_TARGETS = r"MultiHeadDotProductAttention_1/(query|key|value|out)/kernel$"
TRAINED = rf"/({A}|{B})$|^(head|mpp_head)/"  # everything else is frozen under LoRA
Flat = Dict[str, Any]


@dataclasses.dataclass(frozen=True)
class Settings:
  rank: int
  alpha: float
  targets: str
  dropout: float = 0.0  # of the adapter path's input, in training

  @property
  def scale(self) -> float:
    return self.alpha / self.rank


def settings(config: ml_collections.ConfigDict) -> Optional[Settings]:
  """The run's LoRA settings, None when config.lora.rank is 0 (off): parsed once per run
  (vit_jax.training.state_and_step.build), and passed to what needs them."""
  lora = config.get("lora")
  if not lora or not lora.rank:
    return None
  alpha = lora.alpha if lora.alpha is not None else float(lora.rank)
  return Settings(int(lora.rank), float(alpha), lora.targets, float(lora.dropout or 0.0))


def trained_regex(lora: Optional[Settings]) -> str:
  """What trains under LoRA (the adapters and the head); "" (everything) without it."""
  return TRAINED if lora else ""


def check(config: ml_collections.ConfigDict) -> None:
  """Settings refused before any data is read (targets and ranks are checked against the
  kernels when the adapters are made)."""
  lora = config.get("lora")
  if not lora:
    return
  rank = lora.rank
  if not isinstance(rank, int) or isinstance(rank, bool) or rank < 0:
    raise errors.InvalidInput(f"config.lora.rank={rank!r} must be a whole number >= 0 (0: off)")
  if rank == 0 and lora.targets != DEFAULT_TARGETS:
    raise errors.InvalidInput(f"config.lora.targets={lora.targets!r} is set but LoRA is off "
                              "(config.lora.rank=0): set a rank >= 1, e.g. 8")
  config_checks.check_fraction("config.lora.dropout", lora.dropout, "the probability of "
                               "dropping an input of the adapter path; 0 = off")
  if rank == 0 and lora.dropout:
    raise errors.InvalidInput(f"config.lora.dropout={lora.dropout} is set but LoRA is off "
                              "(config.lora.rank=0): set a rank >= 1, e.g. 8")
  if lora.alpha is not None and not 0 < lora.alpha < math.inf:  # nan too: it diverged
    raise errors.InvalidInput(f"config.lora.alpha={lora.alpha} must be > 0 and finite (None: "
                              "the rank)")
  try:
    re.compile(lora.targets)
  except (re.error, TypeError) as e:
    raise errors.InvalidInput(f"config.lora.targets={lora.targets!r} is not a regular "
                              f"expression ({e})") from None


def _split_dims(name: str, shape: Tuple[int, ...], stacked: bool) -> Tuple[int, int, int]:
  """(leading depth dims, input dims, output dims) of a dense kernel: attention's `out`
  reads (heads, head_dim); stacked blocks (scan_layers) carry a depth axis first."""
  lead = int(stacked)
  inputs = 2 if name.endswith("/out/kernel") else 1
  if not name.endswith("/kernel") or len(shape) - lead not in (2, 3) or (
      len(shape) - lead - inputs < 1):
    raise errors.InvalidInput(f"config.lora.targets matches {name} {shape}, which is not a "
                              "dense kernel: narrow the regex to Dense kernels")
  return lead, inputs, len(shape) - lead - inputs


def targets_of(lora: Settings, rules) -> str:
  """The kernels adapted: config.lora.targets, or where it is left at its default, the
  model family's own (TrainingRules.lora_targets: a ViT's attention kernels, ...)."""
  if lora.targets != DEFAULT_TARGETS:
    return lora.targets
  if not rules.lora_targets:
    raise errors.InvalidInput("config.lora.targets: the model's family names no kernels for "
                              "LoRA to adapt by default: set it to a regex over its Dense "
                              "kernels (parameters.txt lists them)")
  return rules.lora_targets


def add_adapters(params, lora: Settings, key: jax.Array):
  """params with `lora_a` (random) and `lora_b` (zeros) beside every target kernel."""
  rules = param_rules.of_params(params)
  flat = traverse_util.flatten_dict(params, sep="/")
  names = list(flat)
  regex = targets_of(lora, rules)
  param_groups.check_matches(names, regex, "lora.targets")
  targets = [name for name in names if re.search(regex, name)]
  for index, name in enumerate(targets):
    shape = tuple(flat[name].shape)
    lead, inputs, _ = _split_dims(name, shape, param_rules.is_stacked(rules, name))
    in_shape, out_shape = shape[lead:lead + inputs], shape[lead + inputs:]
    fan_in, fan_out = math.prod(in_shape), math.prod(out_shape)
    if lora.rank > min(fan_in, fan_out):
      raise errors.InvalidInput(f"config.lora.rank={lora.rank} exceeds {name}'s size "
                                f"({fan_in} x {fan_out}): use a rank <= {min(fan_in, fan_out)}")
    bound = 1.0 / math.sqrt(fan_in)
    prefix = name[:-len("kernel")]
    flat[prefix + A] = jax.random.uniform(jax.random.fold_in(key, index),
                                          shape[:lead] + in_shape + (lora.rank,),
                                          minval=-bound, maxval=bound)
    flat[prefix + B] = jax.numpy.zeros(shape[:lead] + (lora.rank,) + out_shape)
  return traverse_util.unflatten_dict(flat, sep="/")


def merged_flat(flat: Flat, scale: float, rules: Optional[TrainingRules] = None) -> Flat:
  """Flat params with each kernel replaced by W + scale * A @ B and the adapters dropped;
  numpy or jax arrays alike (the same operations, so numpy results are reproducible).
  rules: the params' family's, whose stacked blocks carry a depth axis first (None: a
  file's arrays, one block each)."""
  out = {name: value for name, value in flat.items() if not name.endswith((A, B))}
  for name in flat:
    if not name.endswith("/" + A):
      continue
    prefix = name[:-len(A)]
    kernel, a, b = out[prefix + "kernel"], flat[prefix + A], flat[prefix + B]
    stacked = rules is not None and param_rules.is_stacked(rules, name)
    lead, inputs, _ = _split_dims(prefix + "kernel", kernel.shape, stacked)
    fan_in = math.prod(kernel.shape[lead:lead + inputs])
    rank = a.shape[-1]
    delta = a.reshape(*kernel.shape[:lead], fan_in, rank) @ b.reshape(
        *kernel.shape[:lead], rank, -1)
    out[prefix + "kernel"] = kernel + scale * delta.reshape(kernel.shape)
  return out


def merged(params, lora: Settings):
  """The model's parameter tree, adapters merged in."""
  return traverse_util.unflatten_dict(
      merged_flat(traverse_util.flatten_dict(params, sep="/"), lora.scale,
                  param_rules.of_params(params)), sep="/")


def _adapter_path(lora: Settings, call, args, kwargs, context):
  """A Dense call whose module holds adapters: x W + scale * dropout(x) A B, with a
  dropout key from the apply's `dropout` stream (so a rerun draws the same masks); any
  other call as it is."""
  outputs = call(*args, **kwargs)
  adapters = context.module.variables.get("params", {}) if (
      context.method_name == "__call__") else {}
  if A not in adapters:
    return outputs
  x, a, b = args[0], adapters[A], adapters[B]
  keep = jax.random.bernoulli(context.module.make_rng("dropout"), 1.0 - lora.dropout, x.shape)
  x = jnp.where(keep, x / (1.0 - lora.dropout), 0).astype(outputs.dtype)
  low = jnp.tensordot(x, a.astype(x.dtype), axes=a.ndim - 1)  # the kernel's input dims
  return outputs + lora.scale * jnp.tensordot(low, b.astype(x.dtype), axes=1)


class Merging:
  """A module whose params carry adapters: apply merges them first, init adds them. A thin
  wrapper, not a Flax module, so that the wrapped model's parameter names stay its own
  (the released names) and everything else it offers (patch_size, ...) passes through."""

  def __init__(self, module, lora: Settings):
    self.module, self.lora = module, lora

  def apply(self, variables, *args, **kwargs):
    if self.lora.dropout and kwargs.get("train"):
      with nn.intercept_methods(functools.partial(_adapter_path, self.lora)):
        return self.module.apply(variables, *args, **kwargs)
    variables = {**variables, "params": merged(variables["params"], self.lora)}
    return self.module.apply(variables, *args, **kwargs)

  def init(self, rng, *args, **kwargs):
    variables = self.module.init(rng, *args, **kwargs)
    key = jax.random.fold_in(rng, 1)
    return {**variables, "params": add_adapters(variables["params"], self.lora, key)}

  def __getattr__(self, name):
    return getattr(self.module, name)


def wrap(module, lora: Optional[Settings]):
  """`module` itself when LoRA is off."""
  return Merging(module, lora) if lora else module


def with_adapters(params, lora: Optional[Settings], seed: int):
  """Pretrained params as a LoRA run starts from them (unchanged when LoRA is off)."""
  return add_adapters(params, lora, jax.random.PRNGKey(seed)) if lora else params


def export(raw_params, eval_params, lora: Settings, class_names=None,
           max_patches: Optional[int] = None) -> Tuple[Any, Flat]:
  """(merged params, adapters.npz arrays) at the end of a run, from two host copies of the
  params: the frozen base from the raw params (unchanged since the start) and the trained
  leaves from the evaluated ones (the Polyak average, if kept). adapters.npz holds what the
  base file cannot give: the adapters, the trained head, what loading resized to the run's
  image size (the family's resized_on_load: a ViT's position embedding), which of the
  base's arrays the run used (not a dropped pre_logits, nor the base's head) and their
  sha256 (merging onto another base is refused), and the head's class names and NaFlex
  budget, as params.npz records them."""
  rules = param_rules.of_params(raw_params)
  released = lambda tree: traverse_util.flatten_dict(rules.to_block_layout(tree), sep="/")
  raw = {name: np.asarray(value) for name, value in released(raw_params).items()}
  adapters = {name: np.asarray(value) for name, value in released(eval_params).items()
              if re.search(TRAINED, name)}
  adapters.update({name: value for name, value in raw.items()
                   if re.search(rules.resized_on_load, name) and name not in adapters})
  base = {name: value for name, value in raw.items() if name not in adapters}
  meta = dict(rank=lora.rank, alpha=lora.alpha, targets=targets_of(lora, rules),
              base=sorted(base), base_sha256=base_digest(base),
              class_names=list(class_names) if class_names is not None else None,
              max_patches=max_patches)
  adapters[SETTINGS] = np.array(json.dumps(meta))
  return traverse_util.unflatten_dict(merge(base, adapters), sep="/"), adapters


def base_digest(base: Flat) -> str:
  """A sha256 of the named arrays as float32 (a bf16 or f32 copy of a base alike): the
  identity of the frozen base that adapters.npz was trained on."""
  digest = hashlib.sha256()
  for name in sorted(base):
    value = np.ascontiguousarray(np.asarray(base[name], np.float32))
    digest.update(f"{name}{value.shape}".encode())
    digest.update(value.tobytes())
  return digest.hexdigest()


def base_matches(base: Flat, adapters: Flat) -> Optional[bool]:
  """Whether `base` holds the very arrays the adapters were trained on; None when
  adapters.npz records no identity (written before it was kept)."""
  meta = _settings_of(adapters)
  if "base_sha256" not in meta:
    return None
  used = {name: base[name] for name in meta["base"] if name in base}
  return base_digest(used) == meta["base_sha256"]


def merge(base: Flat, adapters: Flat) -> Flat:
  """The merged released-layout params from a base checkpoint's arrays and adapters.npz's:
  the base arrays the run used, the adapters' head (and position embedding) in place of the
  base's, every adapted kernel plus scale * A @ B."""
  meta = _settings_of(adapters)
  flat = {}
  for name in meta["base"]:
    if name not in base:
      raise errors.InvalidInput(f"the base checkpoint has no {name}: pass the checkpoint the "
                                "adapters were trained from")
    flat[name] = base[name]
  flat.update((name, value) for name, value in adapters.items() if name != SETTINGS)
  for name in [name for name in flat if name.endswith("/" + A)]:  # files: one block each
    kernel, a, b = name[:-len(A)] + "kernel", flat[name], flat[name[:-len(A)] + B]
    fan_in, fan_out = a.size // a.shape[-1], b.size // b.shape[0]
    if kernel not in flat or np.size(flat[kernel]) != fan_in * fan_out:
      raise errors.InvalidInput(f"the base checkpoint's {kernel} does not fit its adapters "
                                f"({fan_in} x {fan_out}): pass the checkpoint the adapters "
                                "were trained from")
  merged_arrays = merged_flat(flat, meta["alpha"] / meta["rank"])
  return {name: np.asarray(value, np.float32) for name, value in merged_arrays.items()}


def _settings_of(adapters: Flat) -> Dict[str, Any]:
  """adapters.npz's settings entry, or one line saying that it is not a LoRA run's."""
  try:
    meta = json.loads(str(adapters[SETTINGS]))
    if not (isinstance(meta["base"], list) and meta["rank"] >= 1 and meta["alpha"] > 0):
      raise ValueError(f"rank {meta['rank']}, alpha {meta['alpha']}")
    return meta
  except (KeyError, TypeError, ValueError) as e:
    raise errors.InvalidInput(f"the adapters' {SETTINGS} entry is damaged ({e}): pass the "
                              "adapters.npz that a LoRA run wrote") from None


def class_names(adapters: Flat):
  return _settings_of(adapters)["class_names"]


def max_patches(adapters: Flat) -> Optional[int]:
  """The run's NaFlex budget (None: square images, or adapters written before it was kept)."""
  return _settings_of(adapters).get("max_patches")


def save_adapters(adapters: Flat, path: str) -> None:
  buffer = io.BytesIO()
  np.savez(buffer, **adapters)
  storage.write_atomic(path, buffer.getvalue())
