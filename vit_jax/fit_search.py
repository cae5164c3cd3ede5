"""When a config's step does not fit its slice: the smallest config changes that do, each
verified by compiling the step it makes (vit_jax.planner), within a time budget.

Candidates, tried in this order (the first ones cost the least speed): spread the
parameters and optimizer state over every device (an `fsdp` mesh), more gradient
accumulation (smaller micro-batches, same result), rematerialisation keeping the matmul
outputs (`dots`), one scanned block (`scan_layers`), full rematerialisation. Single
changes first; pairs only when no single change fits.
"""

import itertools
import time
from typing import Any, Dict, List, Optional

import ml_collections

from vit_jax import planner, sharding

MAX_SUGGESTIONS = 3


def candidates(config: ml_collections.ConfigDict, num_devices: int,
               fsdp_saving: int = None, shortfall: int = None) -> List[Dict[str, Any]]:
  """Single changes ('a.b' keys as in --config.a.b) that lower the memory of a step. An
  fsdp mesh is left out when the state it would shard (fsdp_saving, bytes per device)
  cannot cover the shortfall."""
  found = []
  hopeless = fsdp_saving is not None and shortfall is not None and fsdp_saving < shortfall
  if config.mesh.get("fsdp", 1) == 1 and num_devices > 1 and not hopeless:
    found.append({"mesh.data": 1, "mesh.fsdp": -1})
  parallel = num_devices // max(1, config.mesh.get("tensor", 1))
  more_accum = [{"accum_steps": accum} for accum in (config.accum_steps * 2,
                                                     config.accum_steps * 4)
                if config.batch % accum == 0 and (config.batch // accum) % parallel == 0]
  found += more_accum[:1]
  if config.model.remat_policy == "none":
    found.append({"model.remat_policy": "dots"})
  found += more_accum[1:]
  if not config.model.scan_layers:
    found.append({"model.scan_layers": True})
  if config.model.remat_policy != "full":
    found.append({"model.remat_policy": "full"})
  return found


def as_flags(changes: Dict[str, Any]) -> List[str]:
  return [f"--config.{key}={value}" for key, value in changes.items()]


def fits(config: ml_collections.ConfigDict, target: planner.Target, step: str,
         num_classes: int) -> Optional[int]:
  """The peak bytes per device of `step` ('train' | 'eval') if it fits, else None."""
  mesh = sharding.make_mesh(config.mesh, devices=target.devices)
  programs = planner.build_programs(config, mesh, num_classes)
  try:
    compiled = planner.compile_for(*getattr(programs, step), target)
  except planner.DoesNotFit:
    return None
  peak = planner.memory(compiled, target.is_tpu)["peak_bytes_per_device"]
  limit = target.hbm_bytes_per_device
  return peak if limit is None or peak <= limit else None


def search(config: ml_collections.ConfigDict, target: planner.Target, report: Dict[str, Any],
           budget_s: float, max_suggestions: int = MAX_SUGGESTIONS) -> List[Dict[str, Any]]:
  """Up to max_suggestions changes under which every step that did not fit in `report`
  (planner.plan_steps) fits, smallest first: [{'flags': [...], 'peak_bytes_per_device':
  {step: bytes}}]. Stops when the budget is spent (a suggestion found by then is still
  verified)."""
  deadline = time.monotonic() + budget_s
  steps = [step for step in ("train", "eval") if not report[step]["fits"]]
  num_classes = report["num_classes"]
  shortfall = max(report[step]["shortfall_bytes"] or 0 for step in steps) or None
  singles = candidates(config, target.num_devices, report["fsdp_saving_bytes"], shortfall)
  pairs = [{**a, **b} for a, b in itertools.combinations(singles, 2) if not set(a) & set(b)]
  found = []
  for group in (singles, pairs):
    for changes in group:
      if len(found) >= max_suggestions or time.monotonic() > deadline:
        return found
      changed = planner.with_overrides(config, **changes)
      try:
        sharding.check_config_batches(changed, sharding.make_mesh(changed.mesh,
                                                                  devices=target.devices))
      except sharding.ShardingError:
        continue
      peaks = {}
      for step in steps:
        peaks[step] = fits(changed, target, step, num_classes)
        if peaks[step] is None:
          break
      if all(peak is not None for peak in peaks.values()) and len(peaks) == len(steps):
        found.append({"flags": as_flags(changes), "peak_bytes_per_device": peaks})
    if found:
      return found
  return found
