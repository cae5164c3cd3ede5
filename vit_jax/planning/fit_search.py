"""When a config's step does not fit its slice: the smallest config changes that do, each
verified by compiling the step it makes (vit_jax.planning.compiled_plan), within a time budget.

Candidates for a train step, tried in this order: more gradient accumulation (smaller
micro-batches, the same result), rematerialisation keeping the matmul outputs (`dots`),
the parameters and optimizer state spread over every device (an `fsdp` mesh), four times
the accumulation, full rematerialisation, one scanned block (`scan_layers`). Accumulation
and remat come first: they fit most often, and the fsdp mesh adds collectives to every
micro-batch. For an eval step: half, then a quarter, of batch_eval (results do not
depend on it), then the fsdp mesh. Single changes first; pairs only when no single change
fits. A change that leaves a failing step as it was (more accumulation for an eval step) is
not compiled: when both steps fail, the pairs then join a train change to an eval change.

Each candidate costs about one compile of the step (minutes for the large models on a
few CPU cores): a candidate is started only when the budget left covers the shortest
candidate compile so far, and a search that runs out says so and names what it did not
try.
"""

import dataclasses
import itertools
import time
from typing import Any, Dict, List, Optional

import ml_collections

from vit_jax.base import console
from vit_jax.planning import compiled_plan
from vit_jax.training import sharding

MAX_SUGGESTIONS = 3
# The steps a change can lower the memory of (any other key: both). An eval step has no
# micro-batches and no backward pass to rematerialise; a train step never sees batch_eval.
AFFECTS = {"accum_steps": ("train",), "model.remat_policy": ("train",), "batch_eval": ("eval",)}


def candidates(config: ml_collections.ConfigDict, num_devices: int, steps=("train",),
               fsdp_saving: int = None, shortfall: int = None) -> List[Dict[str, Any]]:
  """Single changes ('a.b' keys as in --config.a.b) that lower the memory of the `steps`
  that do not fit. An fsdp mesh is left out when the state it would shard (fsdp_saving,
  bytes per device) cannot cover the shortfall."""
  hopeless = fsdp_saving is not None and shortfall is not None and fsdp_saving < shortfall
  fsdp = ([{"mesh.data": 1, "mesh.fsdp": -1}]
          if config.mesh.get("fsdp", 1) == 1 and num_devices > 1 and not hopeless else [])
  parallel = num_devices // max(1, config.mesh.get("tensor", 1))
  found = []
  if "train" in steps:
    more_accum = [{"accum_steps": accum} for accum in (config.accum_steps * 2,
                                                       config.accum_steps * 4)
                  if config.batch % accum == 0 and (config.batch // accum) % parallel == 0]
    found += more_accum[:1]
    if config.model.remat_policy == "none":
      found.append({"model.remat_policy": "dots"})
    found += fsdp + more_accum[1:]
    if config.model.remat_policy != "full":
      found.append({"model.remat_policy": "full"})
    if not config.model.scan_layers:
      found.append({"model.scan_layers": True})
  if "eval" in steps:
    found += [{"batch_eval": config.batch_eval // part} for part in (2, 4)
              if config.batch_eval % part == 0 and (config.batch_eval // part) % parallel == 0]
    found += [change for change in fsdp if change not in found]
  return found


def as_flags(changes: Dict[str, Any]) -> List[str]:
  return [f"--config.{key}={value}" for key, value in changes.items()]


def fits(config: ml_collections.ConfigDict, target: compiled_plan.Target, step: str,
         num_classes: int) -> Optional[int]:
  """The peak bytes per device of `step` ('train' | 'eval') if it fits, else None."""
  mesh = sharding.make_mesh(config.mesh, devices=target.devices)
  programs = compiled_plan.build_programs(config, mesh, num_classes)
  try:
    compiled = compiled_plan.compile_for(*getattr(programs, step), target)
  except compiled_plan.DoesNotFit:
    return None
  peak = compiled_plan.memory(compiled, target.is_tpu)["peak_bytes_per_device"]
  limit = target.hbm_bytes_per_device
  return peak if limit is None or peak <= limit else None


@dataclasses.dataclass
class Search:
  """What a search found and what it left: `found` [{'flags': [...],
  'peak_bytes_per_device': {step: bytes}}], `tried` and `not_tried` (lists of flags)."""
  budget_s: float
  found: List[Dict[str, Any]] = dataclasses.field(default_factory=list)
  tried: List[List[str]] = dataclasses.field(default_factory=list)
  not_tried: List[List[str]] = dataclasses.field(default_factory=list)
  out_of_budget: bool = False

  def as_json(self) -> Dict[str, Any]:
    return dataclasses.asdict(self)


def search(config: ml_collections.ConfigDict, target: compiled_plan.Target, report: Dict[str, Any],
           budget_s: float, max_suggestions: int = MAX_SUGGESTIONS) -> Search:
  """Up to max_suggestions changes under which every step that did not fit in `report`
  (compiled_plan.plan_steps) fits, smallest first. A change is started only while the budget
  left covers the shortest one so far (at first: the plan's compiles of those steps)."""
  started = time.monotonic()
  steps = [step for step in ("train", "eval") if not report[step]["fits"]]
  num_classes = report["num_classes"]
  shortfall = max(report[step]["shortfall_bytes"] or 0 for step in steps) or None
  every = candidates(config, target.num_devices, steps, report["fsdp_saving_bytes"], shortfall)
  # A change that leaves a failing step as it was cannot make it fit: not compiled.
  can_fix = lambda changes: all(any(step in AFFECTS.get(key, steps) for key in changes)
                                for step in steps)
  singles = [changes for changes in every if can_fix(changes)]
  pairs = [{**a, **b} for a, b in itertools.combinations(every, 2)
           if not set(a) & set(b) and can_fix({**a, **b})]
  expected = sum(report[step].get("compile_seconds") or 0 for step in steps)
  result = Search(budget_s=budget_s)
  for group in (singles, pairs):
    for index, changes in enumerate(group):
      if len(result.found) >= max_suggestions:
        return result
      left = budget_s - (time.monotonic() - started)
      if left <= 0 or left < expected:
        result.out_of_budget = True
        result.not_tried = [as_flags(c) for c in group[index:]]
        if group is singles and not result.found:
          result.not_tried += [as_flags(c) for c in pairs]
        return result
      changed = compiled_plan.with_overrides(config, **changes)
      try:
        sharding.check_config_batches(changed, sharding.make_mesh(changed.mesh,
                                                                  devices=target.devices))
      except sharding.ShardingError:
        continue
      tried_at = time.monotonic()
      peaks = {}
      with console.stage(f"trying {' '.join(as_flags(changes))} ({index + 1} of "
                         f"{len(group)} {'changes' if group is singles else 'pairs'})"
                         ) as outcome:
        for step in steps:
          peaks[step] = fits(changed, target, step, num_classes)
          if peaks[step] is None:
            outcome(f"the {step} step does not fit")
            break
        else:
          outcome("fits: " + ", ".join(f"{step} {compiled_plan.size(peak)} per device"
                                       for step, peak in peaks.items()))
          result.found.append({"flags": as_flags(changes), "peak_bytes_per_device": peaks})
      result.tried.append(as_flags(changes))
      expected = time.monotonic() - tried_at if not expected else min(
          expected, time.monotonic() - tried_at)
    if result.found:
      return result
  return result
