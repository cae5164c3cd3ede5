"""What a training config needs on a slice, from the compiler, before anything runs.

The train step and the eval step are the main job's own (vit_jax.training.state_and_step.build and
the evaluator's jit_eval_step, same mesh rules, shardings and batch split), lowered on
ShapeDtypeStructs and compiled ahead of time for the target's devices: a TPU slice's
compile-only devices (vit_jax.planning.tpu_slices) or the local ones. Nothing is allocated.

From each compiled program: per-device memory (XLA's memory analysis, or the shortfall
in the compiler's out-of-memory message), FLOPs and the compiler's time estimate
(`optimal_seconds`: a per-operation roofline, not a measurement), and the collectives.

XLA's cost analysis counts a loop body once: gradient accumulation (a scan over
micro-batches) and scan_layers (a scan over blocks) would report a fraction of the work.
With accumulation alone, the compiled step counts one micro-batch and the optimizer update
once, so a step = accum_steps x (step - update) + update, the update compiled alone
(train_step.make_apply_gradients: small, seconds). Scanned blocks, and a step that does
not fit (nothing compiled to read), are priced on loop-free twins instead (accum_steps=1
on one micro-batch, blocks unrolled) of one and two blocks: a cost is linear in the
blocks, and two small programs cost less to compile than a twin of the whole model for a
deep one (for 12 blocks, about the same: a compile has a fixed part).

Each compile is logged as it starts and ends, with its time (vit_jax.base.console.stage).
"""

import dataclasses
import time
from typing import Any, Callable, Dict, Optional, Tuple

import jax
import jax.numpy as jnp
import ml_collections

from vit_jax.base import console, errors
from vit_jax.data import batch_spec
from vit_jax.data.sources import registry
from vit_jax.models import family_registry, model_config
from vit_jax.planning import compiler_readings, contrastive_memory, model_flops
from vit_jax.training import objectives, sharding, state_and_step, update_step
from vit_jax.training.evaluators import classification as classification_eval

GIB = 2**30
# Datasets no metadata describes here (no TFDS builder): the paper's class counts.
PAPER_CLASS_COUNTS = {"imagenet21k": 21_843, "jft": 18_291}
def with_overrides(config: ml_collections.ConfigDict, **changes) -> ml_collections.ConfigDict:
  """A copy of config with 'a.b'-style keys (as in --config.a.b=...) changed."""
  config = config.copy_and_resolve_references()
  with config.unlocked():
    for key, value in changes.items():
      *parents, leaf = key.split(".")
      node = config
      for parent in parents:
        node = node[parent]
      node[leaf] = value
  return config


def num_classes_of(config: ml_collections.ConfigDict) -> int:
  """The head's size, from the dataset's metadata (no example read)."""
  try:
    return registry.class_count(config)
  except errors.UserError:
    if config.dataset in PAPER_CLASS_COUNTS:
      return PAPER_CLASS_COUNTS[config.dataset]
    raise


def _abstract(spec: batch_spec.Spec, placed) -> Dict[str, Any]:
  return batch_spec.map_arrays(
      lambda shape, dtype: jax.ShapeDtypeStruct(shape, dtype, sharding=placed), spec)


@dataclasses.dataclass
class Programs:
  """The steps of one config on one mesh, ready to lower: (jitted fn, abstract args)."""
  train: Tuple[Callable, Tuple]
  eval: Tuple[Callable, Tuple]
  update: Tuple[Callable, Tuple]
  state_bytes: int  # per device: params, optimizer state (and Polyak average)
  fsdp_saving_bytes: int  # per device, if the state were split over every device
  train_batch_bytes: int
  eval_batch_bytes: int
  module: Any  # the model as the objective creates it
  # Model FLOPs of one example (model_flops: an image, or an image-text pair) in each step
  model_flops: Dict[str, Optional[float]]
  example: str  # model_flops.IMAGE or PAIR

  def fixed_bytes(self, step: str) -> int:
    """Bytes per device of a step that do not scale with the examples in one pass: the
    params (eval); the state, the gradient sum and the batch (train)."""
    params = compiler_readings.shard_bytes(self.update[1][1])
    if step == "eval":
      return params
    return self.state_bytes + params + self.train_batch_bytes


def build_programs(config: ml_collections.ConfigDict, mesh, num_classes: int) -> Programs:
  """The main job's train and eval steps for `config` on `mesh`
  (vit_jax.training.state_and_step.build,
  classification_eval.jit_eval_step), and the optimizer update alone."""
  objective = objectives.get(config)
  module, _ = objective.create_model(config, num_classes, load_pretrained=False)
  run = state_and_step.build(config, module, mesh, objective)
  state = jax.tree.map(lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s),
                       run.abstract_state, run.state_shardings)
  batches, replicated = run.batch_sharding, run.replicated
  rng = jax.ShapeDtypeStruct((2,), jnp.uint32, sharding=replicated)
  schedule = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=replicated),
                          run.schedule)
  patch = getattr(module, "patch_size", None)  # NaFlex batches' patches
  train_batch = _abstract(batch_spec.train_batch(config, num_classes, config.batch, patch),
                          batches)
  eval_batch = _abstract(batch_spec.eval_batch(config, config.batch_eval, patch), batches)
  eval_step = classification_eval.jit_eval_step(objective.make_eval_step(run.module, config),
                                                mesh)  # as the loop evaluates it (LoRA's)
  update = jax.jit(update_step.make_apply_gradients(run.optimizer, config),
                   in_shardings=(run.state_shardings, run.state_shardings.params),
                   out_shardings=run.state_shardings, donate_argnums=(0,))
  return Programs(train=(run.step, (state, train_batch, rng, schedule)),
                  eval=(eval_step, (state.params, eval_batch)),
                  update=(update, (state, state.params)),
                  state_bytes=compiler_readings.shard_bytes(state),
                  fsdp_saving_bytes=compiler_readings.fsdp_saving(state, mesh.size),
                  train_batch_bytes=compiler_readings.shard_bytes(train_batch),
                  eval_batch_bytes=compiler_readings.shard_bytes(eval_batch),
                  module=module,
                  model_flops={"train": model_flops.train(module, config, state.params,
                                                          run.trained),
                               "eval": model_flops.forward(module, config)},
                  example=model_flops.example(module))


def loop_free(config: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
  """The twin whose cost analysis counts everything once: one micro-batch, blocks unrolled."""
  return with_overrides(config, accum_steps=1, batch=config.batch // config.accum_steps,
                        **{"model.scan_layers": False})


def size(value: Optional[int]) -> str:
  """Bytes as GiB in progress lines, MiB below a tenth of a GiB (the report formats its
  own)."""
  if value is None:
    return "?"
  return f"{value / GIB:.2f} GiB" if value >= GIB / 10 else f"{value / 2**20:.1f} MiB"


def _compiled_or_shortfall(fn_args: Tuple[Callable, Tuple], target: compiler_readings.Target,
                           what: str) -> Tuple[Any, Dict[str, Any]]:
  """(compiled program or None, its memory and fit) under the target's HBM limit."""
  fn, args = fn_args
  started, cpu = time.perf_counter(), time.process_time()
  timing = lambda: {"compile_seconds": time.perf_counter() - started,
                    "compile_cpu_seconds": time.process_time() - cpu}  # all threads
  with console.stage(f"compiling {what} for {target.name}") as outcome:
    try:
      compiled = compiler_readings.compile_for(fn, args, target)
    except compiler_readings.DoesNotFit as e:
      outcome(f"does not fit: needs {size(e.need)} per device, {size(e.have)} usable"
              if e.need and e.have else "does not fit (the compiler ran out of memory)")
      return None, {"fits": False, "peak_bytes_per_device": e.need,
                    "shortfall_bytes": (e.need - e.have) if e.need and e.have else None,
                    "compiler_message": str(e), **timing()}
    used = compiler_readings.memory(compiled, target.is_tpu)
    limit = target.hbm_bytes_per_device
    fits = limit is None or used["peak_bytes_per_device"] <= limit
    outcome(f"peak {size(used['peak_bytes_per_device'])} per device"
            + (f" of {size(limit)}" if limit else "") + (", fits" if fits else ", DOES NOT FIT"))
  return compiled, {"fits": fits, **used,
                    "shortfall_bytes": None if fits else used["peak_bytes_per_device"] - limit,
                    **timing()}


def _costed(fn_args: Tuple[Callable, Tuple], target: compiler_readings.Target, what: str
            ) -> Optional[Dict[str, Any]]:
  """Cost of a program compiled only to be priced, without the user's HBM limit; None if
  even that does not fit."""
  with console.stage(f"compiling {what}, to count its cost") as outcome:
    try:
      return compiler_readings.cost(compiler_readings.compile_for(*fn_args, target, limit=False))
    except compiler_readings.DoesNotFit:
      outcome("does not fit either")
      return None


def has_loop(compiled) -> bool:
  """Whether a compiled program still holds a loop (XLA may unroll a short one: its cost
  analysis then counts every iteration)."""
  return " while(" in compiled.as_text()


def twins(config: ml_collections.ConfigDict, mesh, num_classes: int
          ) -> Tuple[Dict[int, Programs], int]:
  """Loop-free twins of the steps (one micro-batch, blocks unrolled) by number of blocks,
  and the model's number of blocks. A cost is linear in the blocks: twins of one and two
  blocks (small programs) give it for any depth. A config that cannot
  be cut to two blocks (a freeze or lr_mults pattern naming a later one) gets the whole
  model's twin, a program as large as the step, and so does a family with no repeated
  blocks (its TrainingRules.depth_key None: counted as one)."""
  module = model_config.model_from_config(config, num_classes)
  depth_key = family_registry.for_module(module).part("training", config.model_name).depth_key
  layers = getattr(module, depth_key) if depth_key else 1
  twin = loop_free(config)
  if layers > 2:
    try:
      return {n: build_programs(with_overrides(twin, **{f"model.{depth_key}": n}), mesh,
                                num_classes) for n in (1, 2)}, layers
    except errors.InvalidInput:
      pass
  return {layers: build_programs(twin, mesh, num_classes)}, layers


def _at_depth(costs: Dict[int, Optional[Dict[str, Any]]], layers: int
              ) -> Optional[Dict[str, Any]]:
  """A cost at `layers` blocks from the costs of twins of one and two blocks (or of the
  whole model); None where a twin did not fit."""
  if any(c is None for c in costs.values()):
    return None
  (n1, c1), *rest = sorted(costs.items())
  if not rest:
    return c1
  ((n2, c2),) = rest
  return {key: None if c1[key] is None or c2[key] is None
          else c1[key] + (layers - n1) * (c2[key] - c1[key]) / (n2 - n1) for key in c1}


def _accumulated(step: Optional[Dict[str, Any]], update: Optional[Dict[str, Any]], k: int
                 ) -> Optional[Dict[str, Any]]:
  """A step of k micro-batches from the cost of one (update included) and the update's."""
  if step is None or update is None:
    return None
  combine = lambda key: (None if step[key] is None or update[key] is None
                         else k * (step[key] - update[key]) + update[key])
  return {key: combine(key) for key in ("flops", "bytes", "seconds")}


def _step_cost(config, programs: Programs, compiled_train, get_twins: Callable,
               target: compiler_readings.Target) -> Optional[Dict[str, Any]]:
  """FLOPs and estimated seconds of one whole train step, loops counted in full."""
  k = config.accum_steps
  if compiled_train is not None and not config.model.scan_layers:
    whole = compiler_readings.cost(compiled_train)
    if k == 1 or not has_loop(compiled_train):
      return whole
    # One micro-batch (the loop body, counted once) and the update.
    return _accumulated(whole, _costed(programs.update, target, "the optimizer update alone"),
                        k)
  by_depth, layers = get_twins()
  steps, updates = {}, {}
  for n, twin in by_depth.items():
    steps[n] = _costed(twin.train, target,
                       f"the train step's loop-free twin with {n} block(s)")
    if steps[n] is None:
      return None
    updates[n] = _costed(twin.update, target, f"its optimizer update ({n} block(s))")
  return _accumulated(_at_depth(steps, layers), _at_depth(updates, layers), k)


def _eval_cost(config, compiled_eval, get_twins: Callable,
               target: compiler_readings.Target) -> Optional[Dict[str, Any]]:
  if compiled_eval is not None and not config.model.scan_layers:
    return compiler_readings.cost(compiled_eval)
  by_depth, layers = get_twins()
  return _at_depth({n: _costed(twin.eval, target,
                               f"the eval step's loop-free twin with {n} block(s)")
                    for n, twin in by_depth.items()}, layers)


def _speed(step_cost: Optional[dict], batch: int, analytic: Optional[float],
           target: compiler_readings.Target) -> Dict[str, Any]:
  """Per-example FLOPs, the compiler's examples/s and MFU from one step's per-device cost;
  `analytic`: the step's model FLOPs of one example (vit_jax.planning.model_flops)."""
  if step_cost is None:
    return {"gflop_per_image": None, "estimated_step_seconds": None,
            "estimated_img_per_sec": None, "estimated_mfu": None}
  devices = target.num_devices
  flops = step_cost["flops"] * devices / batch if step_cost["flops"] is not None else None
  seconds = step_cost["seconds"] if target.prices_time else None
  img_per_sec = batch / seconds if seconds else None
  # Model FLOPs: the analytic count, or the compiled one where that is lower
  # (rematerialisation only ever adds to the compiled count).
  per_image = min(analytic, flops) if analytic and flops else flops
  peak = target.peak_flops_per_device
  return {
      "gflop_per_image": flops / 1e9 if flops else None,
      "model_gflop_per_image": per_image / 1e9 if per_image else None,
      "flops_vs_analytic": flops / analytic if flops and analytic else None,
      "estimated_step_seconds": seconds,
      "estimated_img_per_sec": img_per_sec,
      "estimated_img_per_sec_per_chip": (img_per_sec / target.chips
                                         if img_per_sec and target.chips else None),
      "estimated_mfu": (per_image * img_per_sec / (peak * devices)
                        if per_image and img_per_sec and peak else None),
  }


def plan_steps(config: ml_collections.ConfigDict, target: compiler_readings.Target,
               num_classes: Optional[int] = None) -> Dict[str, Any]:
  """The report of vit_jax.plan for `config` on `target` (see the module docstring)."""
  num_classes = num_classes or num_classes_of(config)
  mesh = sharding.make_mesh(config.mesh, devices=target.devices)
  parallel = sharding.batch_parallelism(mesh)
  programs = build_programs(config, mesh, num_classes)

  built = []  # the loop-free twins, built once if needed

  def get_twins() -> Tuple[Dict[int, Programs], int]:
    if not built:
      built.append(twins(config, mesh, num_classes))
    return built[0]

  micro_batch = config.batch // config.accum_steps // parallel
  compiled_train, train = _compiled_or_shortfall(
      programs.train, target, f"the train step (batch {config.batch}: {config.accum_steps} "
      f"micro-batch(es) of {micro_batch} per device)")
  train.update(state_bytes_per_device=programs.state_bytes,
               batch_bytes_per_device=programs.train_batch_bytes)
  pricing = time.perf_counter()  # the programs compiled only to count FLOPs
  train.update(_speed(_step_cost(config, programs, compiled_train, get_twins, target),
                      config.batch, programs.model_flops["train"], target))
  pricing = time.perf_counter() - pricing
  train["collectives"] = (compiler_readings.collectives(compiled_train)
                          if compiled_train is not None else None)
  compiled_eval, evaluation = _compiled_or_shortfall(
      programs.eval, target, f"the eval step (batch {config.batch_eval}: "
      f"{config.batch_eval // parallel} per device)")
  evaluation.update(state_bytes_per_device=programs.state_bytes,
                    batch_bytes_per_device=programs.eval_batch_bytes)
  started = time.perf_counter()
  evaluation.update(_speed(_eval_cost(config, compiled_eval, get_twins, target),
                           config.batch_eval, programs.model_flops["eval"], target))
  pricing += time.perf_counter() - started

  hosts = len({device.process_index for device in target.devices})
  hours = (config.total_steps * train["estimated_step_seconds"] / 3600
           if train["estimated_step_seconds"] and config.total_steps > 0 else None)
  pairs = {}
  if programs.example == model_flops.PAIR:
    pairs = {"text_tower": {key: config.text[key] for key in ("tower", "width", "depth",
                                                              "length")},
             "contrastive_loss_memory": contrastive_memory.report(
                 config, contrastive_memory.embedding_dim(programs.module, config), parallel,
                 programs.fixed_bytes("train"), train.get("peak_bytes_per_device"),
                 target.hbm_bytes_per_device)}
  return {
      "slice": target.name, "devices": target.num_devices, "chips": target.chips,
      "cores": target.cores, "hosts": hosts,
      "device_kind": target.device_kind or target.devices[0].device_kind,
      "mesh": dict(mesh.shape), "model": config.model_name, "num_classes": num_classes,
      "example": programs.example,
      "image_size": config.pp.crop, "max_patches": config.pp.get("max_patches"),
      "dtype": config.dtype, "batch": config.batch,
      "accum_steps": config.accum_steps, "per_device_batch": config.batch // parallel,
      "per_device_micro_batch": config.batch // config.accum_steps // parallel,
      "batch_eval": config.batch_eval, "per_device_eval_batch": config.batch_eval // parallel,
      "per_host_batch": config.batch // hosts,
      # What each host's input pipeline must deliver to keep up (not checked here).
      "needed_img_per_sec_per_host": (train["estimated_img_per_sec"] / hosts
                                      if train["estimated_img_per_sec"] else None),
      "hbm_bytes_per_device": target.hbm_bytes_per_device,
      "peak_tflops_per_device": (target.peak_flops_per_device / 1e12
                                 if target.peak_flops_per_device else None),
      "fits": bool(train["fits"] and evaluation["fits"]),
      "fsdp_saving_bytes": programs.fsdp_saving_bytes if mesh.shape["fsdp"] == 1 else 0,
      "train": train, "eval": evaluation, "pricing_seconds": pricing,
      "total_steps": config.total_steps,
      "estimated_hours": hours,
      "estimated_chip_hours": hours * target.chips if hours and target.chips else None,
      "estimated_core_days": hours * target.cores / 24 if hours and target.cores else None,
      **pairs,
  }
