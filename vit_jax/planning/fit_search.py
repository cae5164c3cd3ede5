"""When a config's step does not fit its slice: the change that makes it fit, computed from
the step's own bytes and verified by compiling it (vit_jax.planning.compiled_plan).

A step's peak per device is about `fixed + per_image x m`: `fixed` the bytes that do not
depend on how many images one pass holds (train: parameters, optimizer state, the
gradient sum and the batch; eval: the parameters), m the images per device in one
micro-batch (eval: in one eval batch). From the plan's failing compile (m images, `need`
bytes) the search computes the largest m that should fit the usable memory and the
accumulation that gives it (accum_steps = per-device batch / m: the global batch, and so
the recipe, stay), compiles that, and refines: with two compiled points the line is their
secant; a micro-batch that fits is raised while the line says a larger one still fits
(fewer micro-batches run faster), one that does not is lowered.

Where accumulation alone cannot fit (one image per device is already over), the same is
done with rematerialisation (`dots`, then `full`: activations recomputed in the backward
pass), then with the state spread over every device (an fsdp mesh), then with bfloat16
compute. Only when none of these can fit does the plan say to lower the batch or use a
larger slice, naming what was checked. `model.scan_layers=True` is never suggested: a
scanned step holds more memory, not less (XLA's rematerialisation, which lets an
unrolled step fit, does not reach across the loop; docs/plan_time.md). An eval step gets
the batch_eval the same arithmetic picks (results do not depend on it), then fsdp and
bfloat16.

A compile that fails for another reason than memory is reported as such. A compile is
started only while the budget left covers the shortest compile of that step so far.
"""

import dataclasses
import time
from typing import Any, Dict, List, Optional, Tuple

import jax
import ml_collections

from vit_jax.base import console, errors
from vit_jax.planning import compiled_plan, compiler_readings
from vit_jax.training import sharding

REMAT_ORDER = ("none", "dots_no_batch", "dots", "full")
FSDP = {"mesh.data": 1, "mesh.fsdp": -1}
BOTH_STEPS = ("mesh.", "dtype", "model.")  # keys that change the eval step too
COMPILES_PER_LEVER = 4
# First guess of what a lever does to the bytes per image, before it is compiled once:
# each stronger remat policy and bfloat16 compute about halve them.
GUESSED_SCALE = 0.5


class OutOfBudget(Exception):
  """The budget left does not cover another compile."""


@dataclasses.dataclass
class Search:
  """What a search found and how: `found` [{'flags', 'changes', 'peak_bytes_per_device':
  {step: bytes}}], `tried` (each compile: flags, step, images per device, result, peak,
  seconds), `failed` (compiles refused for another reason than memory), `checked` (what
  the arithmetic ruled out without compiling), `not_tried` (flags left when the budget
  ran out)."""
  budget_s: float
  found: List[Dict[str, Any]] = dataclasses.field(default_factory=list)
  tried: List[Dict[str, Any]] = dataclasses.field(default_factory=list)
  failed: List[Dict[str, Any]] = dataclasses.field(default_factory=list)
  checked: List[str] = dataclasses.field(default_factory=list)
  not_tried: List[List[str]] = dataclasses.field(default_factory=list)
  out_of_budget: bool = False

  def as_json(self) -> Dict[str, Any]:
    return dataclasses.asdict(self)


def as_flags(changes: Dict[str, Any]) -> List[str]:
  return [f"--config.{key}={value}" for key, value in changes.items()]


@dataclasses.dataclass
class _Context:
  """The search's inputs and its clock."""
  config: ml_collections.ConfigDict
  target: compiler_readings.Target
  num_classes: int
  parallel: int
  budget_s: float
  expected: Dict[str, float]  # shortest compile of each step so far (seconds)
  result: Search
  started: float = dataclasses.field(default_factory=time.monotonic)
  pending: List[List[str]] = dataclasses.field(default_factory=list)  # levers not sized yet

  def per_device(self, step: str) -> int:
    return (self.config.batch if step == "train" else self.config.batch_eval) // self.parallel

  def sizes(self, step: str) -> List[int]:
    """Images per device one pass may hold: divisors of the per-device batch (train: the
    global batch stays), any count up to the per-device eval batch (eval)."""
    whole = self.per_device(step)
    return [m for m in range(1, whole + 1) if step == "eval" or whole % m == 0]

  def sized(self, step: str, m: int) -> Dict[str, Any]:
    if step == "train":
      return {"accum_steps": self.per_device("train") // m}
    return {"batch_eval": m * self.parallel}


def levers(config: ml_collections.ConfigDict, step: str, num_devices: int
           ) -> List[Dict[str, Any]]:
  """The changes keeping the recipe, weakest (fastest) first, that the search sizes the
  micro-batch under: none, stronger remat policies, then an fsdp mesh with the strongest,
  then bfloat16 compute with both."""
  found = [{}]
  if step == "train":
    current = config.model.remat_policy
    stronger = REMAT_ORDER[REMAT_ORDER.index(current) + 1:] if current in REMAT_ORDER else ()
    found += [{"model.remat_policy": p} for p in stronger if p != "dots_no_batch"]
  if config.mesh.get("fsdp", 1) == 1 and num_devices > config.mesh.get("tensor", 1):
    found.append({**found[-1], **FSDP})
  if config.dtype != "bfloat16":
    found.append({**found[-1], "dtype": "bfloat16"})
  return found


def fixed_bytes(programs: compiled_plan.Programs, step: str) -> int:
  """Bytes per device of a step that do not scale with the images in one pass."""
  params = compiler_readings.shard_bytes(programs.update[1][1])
  if step == "eval":
    return params
  return programs.state_bytes + params + programs.train_batch_bytes  # + the gradient sum


def line(fixed: int, best: Optional[Tuple[int, int]], failed: Optional[Tuple[int, int]],
         start: Tuple[float, float]) -> Tuple[float, float]:
  """(intercept, bytes per image) to size the next pass from one lever's compiled points
  (images per device, peak): between the largest that fits and the smallest that does
  not, their secant; from one point, the line through it and `fixed` (steeper than the
  truth, where a program has bytes of its own: it errs towards more accumulation and the
  refinement corrects it); with none, `start`."""
  if best and failed and failed[1] and failed[1] > best[1]:
    slope = (failed[1] - best[1]) / (failed[0] - best[0])
    return best[1] - slope * best[0], slope
  point = best or (failed if failed and failed[1] else None)
  if point:
    return fixed, max(point[1] - fixed, 1) / point[0]
  return start


def largest_fitting(sizes: List[int], intercept: float, slope: float, limit: int
                    ) -> Optional[int]:
  return max((m for m in sizes if intercept + slope * m <= limit), default=None)


def _compile(ctx: _Context, step: str, changes: Dict[str, Any], m: int, expect: float
             ) -> Tuple[str, Optional[int]]:
  """('fits' | 'does not fit' | 'failed', peak or need bytes) of `step` under `changes`."""
  left = ctx.budget_s - (time.monotonic() - ctx.started)
  if left <= 0 or left < ctx.expected[step]:
    raise OutOfBudget()
  changed = compiled_plan.with_overrides(ctx.config, **changes)
  flags, limit = as_flags(changed_only(ctx.config, changes)), ctx.target.hbm_bytes_per_device
  started = time.monotonic()
  problem = None
  with console.stage(f"trying {' '.join(flags)} ({step} step, {m} image(s) per device per "
                     f"pass; expected {compiled_plan.size(int(expect))} of "
                     f"{compiled_plan.size(limit)})") as outcome:
    try:
      mesh = sharding.make_mesh(changed.mesh, devices=ctx.target.devices)
      sharding.check_config_batches(changed, mesh)
      programs = compiled_plan.build_programs(changed, mesh, ctx.num_classes)
      compiled = compiler_readings.compile_for(*getattr(programs, step), ctx.target)
      peak = compiler_readings.memory(compiled, ctx.target.is_tpu)["peak_bytes_per_device"]
      verdict = "fits" if limit is None or peak <= limit else "does not fit"
    except compiler_readings.DoesNotFit as e:
      verdict, peak = "does not fit", e.need
    except (errors.UserError, jax.errors.JaxRuntimeError, ValueError, TypeError) as e:
      verdict, peak, problem = "failed", None, errors_line(e)
      ctx.result.failed.append({"flags": flags, "step": step, "error": problem})
    outcome(verdict + (f": {compiled_plan.size(peak)} per device" if peak else "")
            + (f" ({problem})" if problem else ""))
  seconds = time.monotonic() - started
  if verdict != "failed":
    ctx.expected[step] = min(ctx.expected[step] or seconds, seconds)
  ctx.result.tried.append({"flags": flags, "step": step, "per_device": m, "result": verdict,
                           "peak_bytes_per_device": peak, "seconds": seconds})
  return verdict, peak


def errors_line(error: BaseException) -> str:
  return " ".join(str(error).split())[:300]


def changed_only(config: ml_collections.ConfigDict, changes: Dict[str, Any]) -> Dict[str, Any]:
  """The changes whose value differs from the config's (the flags a user has to add)."""
  def current(key):
    node = config
    for part in key.split("."):
      node = node.get(part) if hasattr(node, "get") else None
    return node
  return {key: value for key, value in changes.items() if current(key) != value}


def _label(config: ml_collections.ConfigDict, lever: Dict[str, Any]) -> str:
  return " ".join(as_flags(changed_only(config, lever))) or "accumulation alone"


def _size_lever(ctx: _Context, step: str, lever: Dict[str, Any], fixed: int,
                start: Tuple[float, float], guessed: bool,
                failed: Tuple[int, Optional[int]]
                ) -> Tuple[Optional[Tuple[int, int]], Tuple[float, float]]:
  """((images per device, peak) of the largest pass that fits under `lever`, or None;
  the last line). `start` is the line before any compile (`guessed`: a guess, so one
  compile checks it even where it says nothing fits); `failed`: (images, peak or None)
  known not to fit."""
  limit, sizes = ctx.target.hbm_bytes_per_device, ctx.sizes(step)
  best, compiled = None, False
  for _ in range(COMPILES_PER_LEVER):
    intercept, slope = line(fixed, best, failed if failed[1] else None, start)
    open_sizes = [m for m in sizes if (best[0] if best else 0) < m < failed[0]]
    if not open_sizes:
      break
    pick = largest_fitting(open_sizes, intercept, slope, limit)
    if pick is None and (best or compiled or not guessed):
      if not best:
        ctx.result.checked.append(
            f"{_label(ctx.config, lever)}: {open_sizes[0]} image(s) per device needs about "
            f"{compiled_plan.size(int(intercept + slope * open_sizes[0]))}")
      break
    pick = pick or open_sizes[0]
    verdict, peak = _compile(ctx, step, {**lever, **ctx.sized(step, pick)}, pick,
                             intercept + slope * pick)
    compiled = True
    if verdict == "failed":
      break
    if verdict == "fits":
      best = (pick, peak)
    else:
      failed = (pick, peak)
      if not peak:  # the compiler gave no size: assume twice the bytes per image
        start = (start[0], start[1] * 2)
  if not best and failed[0] == sizes[0] and compiled:
    ctx.result.checked.append(f"{_label(ctx.config, lever)}: {sizes[0]} image(s) per device "
                              f"does not fit ({compiled_plan.size(failed[1])})")
  return best, line(fixed, best, failed if failed[1] else None, start)


def _search_step(ctx: _Context, step: str, base: Dict[str, Any], failing: Dict[str, Any],
                 wanted: int) -> List[Tuple[Dict[str, Any], int]]:
  """Up to `wanted` (changes, peak) under which `step` fits, weakest lever first; the
  plan's failing compile (`failing`, its report entry) gives the first line."""
  whole = ctx.per_device(step)
  m0 = whole // ctx.config.accum_steps if step == "train" else whole
  all_levers = []
  for lever in levers(ctx.config, step, ctx.target.num_devices):
    if {**base, **lever} not in all_levers:
      all_levers.append({**base, **lever})
  found, previous = [], None  # previous: (lever, fixed, line)
  for index, lever in enumerate(all_levers):
    ctx.pending = [as_flags(changed_only(ctx.config, l)) for l in all_levers[index:]]
    try:
      changed = compiled_plan.with_overrides(ctx.config, **lever)
      mesh = sharding.make_mesh(changed.mesh, devices=ctx.target.devices)
      fixed = fixed_bytes(compiled_plan.build_programs(changed, mesh, ctx.num_classes), step)
    except (errors.UserError, ValueError) as e:
      ctx.result.checked.append(f"{_label(ctx.config, lever)}: not built ({errors_line(e)})")
      continue
    if ctx.target.hbm_bytes_per_device and fixed >= ctx.target.hbm_bytes_per_device:
      ctx.result.checked.append(f"{_label(ctx.config, lever)}: the state alone needs "
                                f"{compiled_plan.size(fixed)} per device")
      continue
    if previous is None:
      need = failing.get("peak_bytes_per_device")
      start = (fixed, 2 * max(ctx.target.hbm_bytes_per_device - fixed, 1) / m0)
      guessed, known = not need, (m0, need)
    else:
      before, before_fixed, (intercept, slope) = previous
      scales = any(lever.get(k) != before.get(k) for k in ("model.remat_policy", "dtype"))
      start = (intercept - (before_fixed - fixed), slope * (GUESSED_SCALE if scales else 1))
      guessed, known = scales, (m0 + 1, None)
    best, end = _size_lever(ctx, step, lever, fixed, start, guessed, known)
    previous = (lever, fixed, end)
    if best:
      found.append(({**lever, **ctx.sized(step, best[0])}, best[1]))
      if len(found) >= wanted:
        break
  ctx.pending = []
  return found


def search(config: ml_collections.ConfigDict, target: compiler_readings.Target,
           report: Dict[str, Any], budget_s: float, max_suggestions: int = 1) -> Search:
  """Up to max_suggestions changes, each verified by compiling, under which every step
  of `report` (compiled_plan.plan_steps) fits; the weakest (fastest) first."""
  mesh = sharding.make_mesh(config.mesh, devices=target.devices)
  result = Search(budget_s=budget_s)
  ctx = _Context(config, target, report["num_classes"], sharding.batch_parallelism(mesh),
                 budget_s, {step: report[step].get("compile_seconds") or 0
                            for step in ("train", "eval")}, result)
  failing = [step for step in ("train", "eval") if not report[step]["fits"]]
  evals = {}  # shared changes -> the eval step's search under them
  try:
    options = (_search_step(ctx, "train", {}, report["train"], max_suggestions)
               if "train" in failing else [({}, None)])
    for changes, peak in options:
      peaks = {"train": peak} if peak else {}
      shared = {k: v for k, v in changes.items() if k.startswith(BOTH_STEPS)}
      key = tuple(sorted(shared.items()))
      if "eval" in failing:
        if key not in evals:
          evals[key] = _search_step(ctx, "eval", shared, report["eval"], 1)
        if not evals[key]:
          continue
        eval_changes, peaks["eval"] = evals[key][0]
        changes = {**changes, **eval_changes}
      elif shared:  # the eval step changes too: checked under the same limit
        verdict, peaks["eval"] = _compile(ctx, "eval", {**shared, **ctx.sized(
            "eval", ctx.per_device("eval"))}, ctx.per_device("eval"),
                                          report["eval"]["peak_bytes_per_device"] or 0)
        if verdict != "fits":
          result.checked.append(f"{' '.join(as_flags(shared))}: the eval step does not fit")
          continue
      result.found.append({"flags": as_flags(changed_only(config, changes)),
                           "changes": changed_only(config, changes),
                           "peak_bytes_per_device": peaks})
  except OutOfBudget:
    result.out_of_budget = True
    result.not_tried = ctx.pending
  return result
