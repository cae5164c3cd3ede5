"""Released-layout arrays <-> PyTorch-style state dicts, by renaming rules (numpy only).

A rule pairs our key templates with one PyTorch key template and a kind that says how
the arrays change between the two layouts:
  same   identical array (class token, position embedding, biases, norm scales);
  dense  Dense kernel (in, out) <-> Linear weight (out, in);
  conv   HWIO kernel <-> OIHW weight;
  heads  one or several (D, heads, head_dim) attention projections <-> one Linear weight
         ((heads * head_dim) per projection, stacked: timm's fused qkv) or bias;
  out    (heads, head_dim, D) output projection <-> Linear weight (D, heads * head_dim).
Template fields: `{i}` (block) is the same number in both layouts; `{s}`/`{u}` (ResNet
stage/unit) count from 1 in ours and appear as `{s0}`/`{u0}`, counted from 0, in PyTorch
keys. The heads kinds need the head count going back: PyTorch weights do not hold it.
"""

import re
from typing import Callable, Dict, List, NamedTuple, Sequence, Tuple

import numpy as np

from vit_jax.base import errors

Flat = Dict[str, np.ndarray]


class Rule(NamedTuple):
  ours: Tuple[str, ...]  # templates of our keys (several: fused into one PyTorch array)
  theirs: str  # template of the PyTorch key
  kind: str


def rule(ours, theirs: str, kind: str = "same") -> Rule:
  return Rule((ours,) if isinstance(ours, str) else tuple(ours), theirs, kind)


def norm(ours: str, theirs: str) -> List[Rule]:
  """A LayerNorm or GroupNorm: scale/bias <-> weight/bias."""
  return [rule(f"{ours}/scale", f"{theirs}.weight"), rule(f"{ours}/bias", f"{theirs}.bias")]


def linear(ours: str, theirs: str, kind: str = "dense") -> List[Rule]:
  """A Dense layer (kind dense) or an attention output projection (kind out)."""
  return [rule(f"{ours}/kernel", f"{theirs}.weight", kind), rule(f"{ours}/bias", f"{theirs}.bias")]


def projections(ours: str, names: Sequence[str], theirs: str) -> List[Rule]:
  """Attention projections `ours/NAME` fused into one Linear `theirs` (one name: not fused)."""
  return [rule([f"{ours}/{name}/kernel" for name in names], f"{theirs}.weight", "heads"),
          rule([f"{ours}/{name}/bias" for name in names], f"{theirs}.bias", "heads")]


class LayoutMismatch(errors.InvalidInput):
  """Arrays that the rules leave without a place (listed in the message and in `keys`),
  or one that does not split into its layers."""

  def __init__(self, message: str, keys=()):
    super().__init__(message)
    self.keys = tuple(keys)


def _to_torch(kind: str, values: List[np.ndarray]) -> np.ndarray:
  if kind == "same":
    return values[0]
  if kind == "dense":
    return values[0].T
  if kind == "conv":
    return values[0].transpose(3, 2, 0, 1)
  if kind == "out":
    return values[0].reshape(-1, values[0].shape[-1]).T
  if values[0].ndim == 3:  # heads: projection kernels (D, heads, head_dim)
    return np.concatenate([v.reshape(v.shape[0], -1).T for v in values])
  return np.concatenate([v.reshape(-1) for v in values])  # heads: biases (heads, head_dim)


def _from_torch(kind: str, value: np.ndarray, parts: int, num_heads: int) -> List[np.ndarray]:
  if kind == "same":
    return [value]
  if kind == "dense":
    return [value.T]
  if kind == "conv":
    return [value.transpose(2, 3, 1, 0)]
  if kind == "out":
    return [value.T.reshape(num_heads, -1, value.shape[0])]
  if value.shape[0] % (parts * num_heads):
    raise LayoutMismatch(f"has {value.shape[0]} rows, which do not split into {parts} "
                         f"projection(s) of {num_heads} heads")
  chunks = np.split(value, parts)
  if value.ndim == 2:
    return [c.T.reshape(c.shape[1], num_heads, -1) for c in chunks]
  return [c.reshape(num_heads, -1) for c in chunks]


def _pattern(template: str) -> "re.Pattern":
  escaped = re.escape(template)
  return re.compile("^" + re.sub(r"\\\{(\w+)\\\}", r"(?P<\1>\\d+)", escaped) + "$")


def _shift(fields: Dict[str, str], to_torch: bool) -> Dict[str, str]:
  """Adds the other layout's spelling of every field: s <-> s0 (ResNet counts from 1)."""
  out = dict(fields)
  for name, value in fields.items():
    if to_torch and name in ("s", "u"):
      out[name + "0"] = str(int(value) - 1)
    elif not to_torch and name in ("s0", "u0"):
      out[name[:-1]] = str(int(value) + 1)
  return out


def _matches(rules: Sequence[Rule], keys, side: Callable[[Rule], str], to_torch: bool):
  """(rule, fields) for every key that matches a rule's template on `side`."""
  for r in rules:
    pattern = _pattern(side(r))
    for key in sorted(keys):
      found = pattern.match(key)
      if found:
        yield r, _shift(found.groupdict(), to_torch)


def _unplaced(keys, what: str) -> LayoutMismatch:
  keys = sorted(keys)
  shown = ", ".join(keys[:6]) + (f" (+{len(keys) - 6} more)" if len(keys) > 6 else "")
  return LayoutMismatch(f"{what}: {shown}", keys)


def to_torch(flat: Flat, rules: Sequence[Rule], target: str) -> Flat:
  """Our released-layout arrays -> a state dict; every array must have a place."""
  out, used = {}, set()
  for r, fields in _matches(rules, flat, lambda r: r.ours[0], to_torch=True):
    keys = [template.format(**fields) for template in r.ours]
    if all(key in flat for key in keys):
      out[r.theirs.format(**fields)] = np.ascontiguousarray(
          _to_torch(r.kind, [flat[key] for key in keys]), np.float32)
      used.update(keys)
  if set(flat) - used:
    raise _unplaced(set(flat) - used, f"{target} has no place for")
  return out


def from_torch(state: Flat, rules: Sequence[Rule], num_heads: int, source: str) -> Flat:
  """A state dict -> our released-layout arrays; every array must have a place."""
  out, used = {}, set()
  for r, fields in _matches(rules, state, lambda r: r.theirs, to_torch=False):
    key = r.theirs.format(**fields)
    try:
      values = _from_torch(r.kind, np.asarray(state[key], np.float32), len(r.ours), num_heads)
    except LayoutMismatch as e:
      raise LayoutMismatch(f"{key} {e}") from None
    except ValueError:  # a transpose or reshape that the array's rank does not allow
      raise LayoutMismatch(f"{key} has shape {state[key].shape}, which fits no "
                           f"{r.kind} layer") from None
    for template, value in zip(r.ours, values):
      out[template.format(**fields)] = value
    used.add(key)
  if set(state) - used:
    raise _unplaced(set(state) - used, f"vit_jax has no place for these {source} arrays")
  return out
