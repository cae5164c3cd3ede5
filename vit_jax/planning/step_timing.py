"""The benchmark command's library: the real train step or inference on synthetic data,
compiled and timed, as numbers.

What `python -m vit_jax.benchmark` prints (its docstring explains each number): compile
time kept apart from the step times, img/s, device memory, and MFU, which divides model
FLOPs (analytic: the family's Geometry.flops_per_image, cross-checked with XLA's cost
analysis) by a peak measured on the spot with a large matmul in the same dtype (or the peak
given). The train step is the main job's own (vit_jax.training.state_and_step), so a run's
train/img_per_sec compares with it. vit_jax.planning.part_timing times models by parts with
the same numbers.
"""

import math
import statistics
import time
from typing import Any, Dict, List, Optional, Tuple

import jax
import jax.numpy as jnp
import ml_collections

from vit_jax.data import batch_spec
from vit_jax.data.sources import registry
from vit_jax.models import attention, family_registry
from vit_jax.planning import model_flops
from vit_jax.training import objectives, sharding, state_and_step


def measure_peak_flops(dtype, size: Optional[int] = None, repeats: int = 5) -> float:
  """FLOP/s of a large square matmul on device 0 (the best of a few runs).

  Random operands: constant ones or zeros run measurably faster on GPUs."""
  size = size or (8192 if jax.devices()[0].platform != "cpu" else 2048)
  a = jax.random.normal(jax.random.PRNGKey(0), (size, size), dtype)
  matmul = jax.jit(lambda x: x @ x)
  matmul(a).block_until_ready()
  best = float("inf")
  for _ in range(repeats):
    start = time.perf_counter()
    matmul(a).block_until_ready()
    best = min(best, time.perf_counter() - start)
  return 2 * size**3 / best


def benchmark_config(image_size: int) -> ml_collections.ConfigDict:
  """Classification with the fine-tuning optimizer of the paper: SGD momentum (bf16
  buffer), clip 1, cosine; no accumulation, no Polyak average."""
  return ml_collections.ConfigDict(dict(
      objective="classification", optimizer="sgd", momentum=0.9, optim_dtype="bfloat16",
      base_lr=0.01, warmup_steps=10, total_steps=1000, decay_type="cosine", grad_norm_clip=1.0,
      weight_decay=0.0, adam_b1=0.9, adam_b2=0.999, accum_steps=1, polyak_decay=0.0,
      loss="softmax_xent", label_smoothing=0.0, pp={"crop": image_size}))


def synthetic_images(config, module, batch: int):
  """Random images of the step's shapes (vit_jax.data.batch_spec), not zeros (those can run
  faster); NaFlex (config.pp.max_patches): every patch of the budget real, the grid the
  squarest that fits (the step costs the same whatever the grids)."""
  spec = batch_spec.image(config, batch, getattr(module, "patch_size", None))
  if not isinstance(spec, dict):
    return jax.random.uniform(jax.random.PRNGKey(2), spec[0], minval=-1, maxval=1)
  budget = spec["mask"][0][1]
  rows = math.isqrt(budget)
  return {"patches": jax.random.uniform(jax.random.PRNGKey(2), spec["patches"][0],
                                        minval=-1, maxval=1),
          "mask": jnp.ones(spec["mask"][0], jnp.int32),
          "grid": jnp.tile(jnp.asarray([[rows, budget // rows]], jnp.int32), (batch, 1))}


def synthetic_captions(config, batch: int) -> Dict[str, jax.Array]:
  """The batch's caption tokens where its objective reads them (batch_spec.text: an
  image-text pair's), random ids of the text tower's vocabulary (config.text.vocab_size),
  none a padding id (0); else {}."""
  return {name: jax.random.randint(jax.random.PRNGKey(4), shape, 1,
                                   max(config.text.vocab_size, 2), dtype)
          for name, (shape, dtype) in batch_spec.text(config, batch).items()}


def step_function(module, mode, mesh, batch, image_size, config
                  ) -> Tuple[Any, Tuple, Optional[float]]:
  """(jitted fn, args, model FLOPs of one example) of the train step `config` trains
  `module` with (vit_jax.training.state_and_step: the main job's own) or of inference
  (of every input the model takes: an image-text pair's images and captions), state placed
  on the mesh."""
  del image_size  # config.pp's
  inputs = (synthetic_images(config, module, batch),
            *synthetic_captions(config, batch).values())
  first = jax.tree.map(lambda x: x[:1], inputs)
  batch_sharding = sharding.batch_sharding(mesh)
  if mode == "infer":
    params = jax.eval_shape(module.init, jax.random.PRNGKey(0), *first)["params"]
    param_sharding = sharding.param_shardings(params, mesh)
    params = jax.jit(lambda r: module.init(r, *first)["params"],
                     out_shardings=param_sharding)(jax.random.PRNGKey(0))
    fn = jax.jit(lambda p, x: module.apply({"params": p}, *x),
                 in_shardings=(param_sharding, batch_sharding))
    return (fn, (params, jax.device_put(inputs, batch_sharding)),
            model_flops.forward(module, config))
  run = state_and_step.build(config, module, mesh)
  labels = jax.random.randint(jax.random.PRNGKey(3), (batch,), 0,
                              max(getattr(module, "num_classes", 0) or 0, 1))
  data = jax.device_put({"image": inputs[0], "label": labels,
                         **synthetic_captions(config, batch)}, batch_sharding)
  return (run.step, (run.init(jax.random.PRNGKey(0)), data, jax.random.PRNGKey(1),
                     run.placed_schedule()),
          model_flops.train(module, config, run.abstract_state.params, run.trained))


def run(model: str, mode: str, batch: int, image_size: int, dtype: str = "float32",
        steps: int = 10, mesh_config: Optional[Dict[str, int]] = None,
        peak_flops: Optional[float] = None, **model_overrides) -> dict:
  """Benchmarks one configuration; returns the numbers as a dict."""
  mesh = sharding.make_mesh(mesh_config or {"data": -1})
  sharding.check_batch_size(batch, mesh)
  module = family_registry.create_model(model, num_classes=1000, dtype=jnp.dtype(dtype),
                                        **model_overrides)
  return measure(module, mode, mesh, batch, image_size, benchmark_config(image_size), steps,
                 peak_flops, model_name=model)


def config_model_name(config: ml_collections.ConfigDict) -> str:
  """A row's model: config.model_name, and an image-text pair's text tower after a '+'."""
  return config.model_name + (f"+{config.text.tower}" if batch_spec.text(config, 1) else "")


def run_config(config: ml_collections.ConfigDict, mode: str = "train", steps: int = 10,
               peak_flops: Optional[float] = None) -> dict:
  """Benchmarks the step a training config runs (see the module docstring)."""
  mesh = sharding.make_mesh(config.mesh)
  sharding.check_config_batches(config, mesh)
  module, _ = objectives.get(config).create_model(config, registry.class_count(config),
                                                  load_pretrained=False)
  batch = config.batch if mode == "train" else config.batch_eval
  result = measure(module, mode, mesh, batch, config.pp.crop, config, steps, peak_flops,
                   model_name=config_model_name(config))
  return {**result, "accum_steps": config.accum_steps if mode == "train" else 1}


def compile_and_time(fn, args: Tuple, steps: int, carries_state: bool = False
                     ) -> Tuple[Any, float, List[float]]:
  """(compiled fn, compile seconds, the seconds of each of `steps` calls); carries_state: a
  train step, whose first output is the next call's first argument."""
  start = time.perf_counter()
  compiled = fn.lower(*args).compile()
  compile_s = time.perf_counter() - start
  times = []  # steps=0: compile only
  for _ in range(steps):
    start = time.perf_counter()
    out = compiled(*args)
    jax.block_until_ready(out)
    times.append(time.perf_counter() - start)
    if carries_state:
      args = (out[0], *args[1:])
  return compiled, compile_s, times


def numbers(compiled, compile_s: float, times: List[float], batch: int, devices: int,
            model_flops: Optional[float], peak: float) -> Dict[str, Any]:
  """A row's measured columns (vit_jax.benchmark.COLUMNS) for `batch` items a step over
  `devices`: model_flops per item where counted, else XLA's count; MFU against `peak`
  FLOP/s per device; memory from the compiled program."""
  cost = (compiled.cost_analysis() or {})
  cost = cost[0] if isinstance(cost, list) else cost
  xla_flops = float(cost.get("flops", 0.0)) * devices / batch or None
  flops = model_flops or xla_flops
  memory = compiled.memory_analysis()
  device_mib = (memory.argument_size_in_bytes + memory.output_size_in_bytes +
                memory.temp_size_in_bytes - memory.alias_size_in_bytes) / 2**20
  step_s = statistics.median(times) if times else None
  img_per_sec = batch / step_s if step_s else None
  return {
      "compile_s": compile_s, "step_s_median": step_s, "step_s_min": min(times, default=None),
      "step_s_max": max(times, default=None), "img_per_sec": img_per_sec,
      "img_per_sec_per_device": img_per_sec / devices if img_per_sec else None,
      "gflop_per_image": flops / 1e9 if flops else None,
      "xla_gflop_per_image": xla_flops / 1e9 if xla_flops else None,
      "peak_tflops_per_device": peak / 1e12,
      "mfu": flops * img_per_sec / (peak * devices) if flops and img_per_sec else None,
      "mib_per_device": device_mib,
  }


def measure(module, mode: str, mesh, batch: int, image_size: int,
            config: ml_collections.ConfigDict, steps: int, peak_flops: Optional[float],
            model_name: str) -> dict:
  """Compiles and times `steps` steps of `module`; the numbers as a dict. Its examples are
  images, or image-caption pairs (`example`: vit_jax.planning.model_flops) whose rate is
  the img_per_sec keys' and, named so, pairs_per_sec's."""
  dtype = jnp.dtype(getattr(module, "dtype", None) or config.dtype).name
  # matmul FLOPs as the family counts them (a locked tower forward only); None where it
  # does not (hybrids: XLA's count)
  fn, args, flops = step_function(module, mode, mesh, batch, image_size, config)
  compiled, compile_s, times = compile_and_time(fn, args, steps, carries_state=mode == "train")
  patches = (config.get("pp") or {}).get("max_patches")
  peak = peak_flops or measure_peak_flops(jnp.dtype(dtype))
  measured = (jax.local_devices()[0].memory_stats() or {}).get("peak_bytes_in_use")  # GPU/TPU
  impl = getattr(module, "attention_impl", None)  # None: a model without attention
  example = model_flops.example(module)
  timed = numbers(compiled, compile_s, times, batch, jax.device_count(), flops, peak)
  if example == model_flops.PAIR:
    timed.update(pairs_per_sec=timed["img_per_sec"],
                 pairs_per_sec_per_device=timed["img_per_sec_per_device"])
  return {
      "model": model_name, "mode": mode, "batch": batch, "image_size": image_size,
      "max_patches": patches, "dtype": dtype, "example": example,
      "attention_impl": impl and attention.attention_backend(impl, module.dtype),
      "unpadded_inference": getattr(module, "unpadded_inference", None),
      "remat_policy": getattr(module, "remat_policy", None),
      "scan_layers": getattr(module, "scan_layers", None), "fp8": getattr(module, "fp8", None),
      "devices": jax.device_count(), "platform": jax.devices()[0].platform,
      **timed,
      "peak_mib_measured": measured / 2**20 if measured else None,
  }
