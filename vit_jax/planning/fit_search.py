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
from typing import Any, Callable, Dict, List, Optional, Tuple

import jax
import ml_collections

from vit_jax.base import console, errors
from vit_jax.planning import compiled_plan, compiler_readings, contrastive_memory
from vit_jax.training import objectives, sharding

REMAT_ORDER = ("none", "dots_no_batch", "dots", "full")
FSDP = {"mesh.data": 1, "mesh.fsdp": -1}
BOTH_STEPS = ("mesh.", "dtype", "model.")  # keys that change the eval step too
COMPILES_PER_LEVER = 4
# A global batch whose step takes this share of the usable memory is the search's answer
# (where the batch itself is sized: each compile of a large batch takes minutes).
CLOSE_ENOUGH = 0.97
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
  # False: the objective takes no accumulation (a contrastive loss pairs the whole batch):
  # the train step is sized by the global batch itself, up to `cap` per device
  accumulates: bool = True
  cap: int = 0
  # m examples per device -> the train step's bytes that are not on its line (a contrastive
  # loss's, which grow with m^2)
  extra: Callable[[int], float] = lambda m: 0

  def per_device(self, step: str) -> int:
    return (self.config.batch if step == "train" else self.config.batch_eval) // self.parallel

  def sizes(self, step: str) -> List[int]:
    """Images per device one pass may hold: divisors of the per-device batch (train: the
    global batch stays), any count up to the per-device eval batch (eval); for an
    objective that does not accumulate, per-device batches up to the cap (multiples of 8
    from 8 on)."""
    whole = self.per_device(step)
    if step == "eval" or self.accumulates:
      return [m for m in range(1, whole + 1) if step == "eval" or whole % m == 0]
    return [m for m in range(1, max(whole, self.cap) + 1) if m < 8 or m % 8 == 0]

  def sized(self, step: str, m: int) -> Dict[str, Any]:
    if step == "eval":
      return {"batch_eval": m * self.parallel}
    if self.accumulates:
      return {"accum_steps": self.per_device("train") // m}
    return {"batch": m * self.parallel}

  def off_line(self, step: str) -> Callable[[int], float]:
    """m per device -> a step's bytes that are not on its line (the train step's `extra`)."""
    return self.extra if step == "train" else (lambda m: 0)

  def on_line(self, step: str, point: Optional[Tuple[int, Optional[int]]]
              ) -> Optional[Tuple[int, Optional[int]]]:
    """A compiled point (m, peak or None) less its bytes off the line; None stays."""
    if not point or not point[1]:
      return None
    return point[0], point[1] - self.off_line(step)(point[0])


def accumulates(config: ml_collections.ConfigDict) -> bool:
  """Whether the config's objective takes gradient accumulation (its own check refuses
  accum_steps otherwise)."""
  try:
    objectives.get(config).check(compiled_plan.with_overrides(config, accum_steps=2))
  except errors.InvalidInput:
    return False
  return True


def off_line_bytes(report: Dict[str, Any]) -> Callable[[int], float]:
  """m per device -> the bytes of the train step the line leaves out: a contrastive loss's
  (the plan's contrastive_loss_memory), else none."""
  memory = report.get("contrastive_loss_memory")
  if memory is None:
    return lambda m: 0
  return contrastive_memory.loss_bytes(memory["batch_devices"], memory["embedding_dim"],
                                       memory["way"])


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


def largest_fitting(sizes: List[int], intercept: float, slope: float, limit: int,
                    extra: Callable[[int], float] = lambda m: 0) -> Optional[int]:
  return max((m for m in sizes if intercept + slope * m + extra(m) <= limit), default=None)


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
  with console.stage(f"trying {' '.join(flags)} ({step} step, {m} per device per "
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
                failed: Tuple[int, Optional[int]],
                best: Optional[Tuple[int, int]] = None
                ) -> Tuple[Optional[Tuple[int, int]], Tuple[float, float]]:
  """((images per device, peak) of the largest pass that fits under `lever`, or None;
  the last line). `start` is the line before any compile (`guessed`: a guess, so one
  compile checks it even where it says nothing fits); `failed`: (images, peak or None)
  known not to fit; `best`: (images, peak) known to fit (the search goes up from it)."""
  limit, sizes = ctx.target.hbm_bytes_per_device, ctx.sizes(step)
  extra = ctx.off_line(step)
  compiled = False
  for _ in range(COMPILES_PER_LEVER):
    if (best and step == "train" and not ctx.accumulates
        and best[1] >= CLOSE_ENOUGH * limit):
      break  # a larger batch would gain less than the memory left
    intercept, slope = line(fixed, ctx.on_line(step, best), ctx.on_line(step, failed), start)
    open_sizes = [m for m in sizes if (best[0] if best else 0) < m < failed[0]]
    if not open_sizes:
      break
    pick = largest_fitting(open_sizes, intercept, slope, limit, extra)
    if pick is None and (best or compiled or not guessed):
      if not best:
        smallest = open_sizes[0]
        need = int(intercept + slope * smallest + extra(smallest))
        ctx.result.checked.append(f"{_label(ctx.config, lever)}: {smallest} image(s) per "
                                  f"device needs about {compiled_plan.size(need)}")
      break
    pick = pick or open_sizes[0]
    verdict, peak = _compile(ctx, step, {**lever, **ctx.sized(step, pick)}, pick,
                             intercept + slope * pick + extra(pick))
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
  return best, line(fixed, ctx.on_line(step, best), ctx.on_line(step, failed), start)


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
      fixed = compiled_plan.build_programs(changed, mesh, ctx.num_classes).fixed_bytes(step)
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


def _context(config: ml_collections.ConfigDict, target: compiler_readings.Target,
             report: Dict[str, Any], result: Search, cap: int = 0) -> _Context:
  mesh = sharding.make_mesh(config.mesh, devices=target.devices)
  return _Context(config, target, report["num_classes"], sharding.batch_parallelism(mesh),
                  result.budget_s, {step: report[step].get("compile_seconds") or 0
                                    for step in ("train", "eval")}, result,
                  accumulates=accumulates(config), cap=cap, extra=off_line_bytes(report))


def search(config: ml_collections.ConfigDict, target: compiler_readings.Target,
           report: Dict[str, Any], budget_s: float, max_suggestions: int = 1) -> Search:
  """Up to max_suggestions changes, each verified by compiling, under which every step
  of `report` (compiled_plan.plan_steps) fits; the weakest (fastest) first."""
  result = Search(budget_s=budget_s)
  ctx = _context(config, target, report, result)
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


def largest_batch(config: ml_collections.ConfigDict, target: compiler_readings.Target,
                  report: Dict[str, Any], budget_s: float,
                  searched: Optional[Search] = None) -> Dict[str, Any]:
  """For an objective that does not accumulate (a contrastive loss: the global batch is
  what the devices hold at once), the largest global batch whose train step fits the
  target, the config otherwise as it is: sized from the compiled step's bytes and the
  loss's own (the plan's contrastive_loss_memory), each size verified by compiling, at
  most COMPILES_PER_LEVER compiles within budget_s. Where the plan's step fits, larger
  batches are tried; where it does not, the search for changes (`searched`) has sized the
  batch down already and its compiles are read instead. Returns {'batch' (None: none
  verified), 'peak_bytes_per_device' (its train step's), 'smallest_not_fitting' (the
  least global batch compiled that does not fit, None if none), 'tried', 'failed',
  'out_of_budget', 'budget_s'}."""
  result = searched or Search(budget_s=budget_s)
  ctx = _context(config, target, report, result,
                 cap=contrastive_memory.LARGEST_SEARCHED // sharding.batch_parallelism(
                     sharding.make_mesh(config.mesh, devices=target.devices)))
  train, m0 = report["train"], ctx.per_device("train")
  points = [(m0, train["peak_bytes_per_device"], "fits" if train["fits"] else "does not fit")]
  if searched is None and train["fits"]:
    fixed = report["contrastive_loss_memory"]["fixed_bytes"]
    try:
      _size_lever(ctx, "train", {}, fixed, (fixed, 0.0), False, (ctx.cap + 1, None),
                  best=(m0, train["peak_bytes_per_device"]))
    except OutOfBudget:
      result.out_of_budget = True
  batch_only = [f"--config.batch={t['per_device'] * ctx.parallel}" for t in result.tried]
  points += [(t["per_device"], t["peak_bytes_per_device"], t["result"])
             for t, flags in zip(result.tried, batch_only)
             if t["step"] == "train" and t["flags"] == [flags]]
  fitting = [(m, peak) for m, peak, verdict in points if verdict == "fits"]
  too_big = [m for m, _, verdict in points if verdict == "does not fit"]
  best = max(fitting, default=(None, None))
  return {"batch": best[0] * ctx.parallel if best[0] else None,
          "peak_bytes_per_device": best[1],
          "smallest_not_fitting": min(too_big) * ctx.parallel if too_big else None,
          "tried": result.tried, "failed": result.failed,
          "out_of_budget": result.out_of_budget, "budget_s": budget_s}
