"""Throughput of the real train step or inference on synthetic data: img/s and MFU.

  python -m vit_jax.benchmark --model=ViT-B_16 --mode=train --batch=256 --dtype=bfloat16
  python -m vit_jax.benchmark --suite --json=results.jsonl

Compile time is excluded from the step times and reported on its own. MFU divides
model FLOPs (analytic, cross-checked with XLA's cost analysis) by a peak measured on the
spot with a large matmul in the same dtype (or --peak_tflops).
"""

import argparse
import json
import statistics
import time
from typing import Dict, Optional

import jax
import jax.numpy as jnp
import ml_collections

from vit_jax import optim, sharding, train_step
from vit_jax.models import vit, zoo

SUITE = [(model, mode, size) for model in ("ViT-Ti_16", "ViT-B_16", "ViT-L_16")
         for size in (224, 384) for mode in ("train", "infer")]


def forward_flops_per_image(module: vit.VisionTransformer, image_size: int) -> float:
  """Matmul FLOPs (2 per multiply-add) of one plain-ViT forward pass; None for hybrids."""
  if module.resnet_stages is not None:
    return None
  patches = (image_size // module.patch_size) ** 2
  tokens = patches + (module.classifier == "token")
  d, m = module.hidden_size, module.mlp_dim
  per_layer = 2 * tokens * (4 * d * d + 2 * d * m) + 4 * tokens * tokens * d
  embedding = 2 * patches * module.patch_size**2 * 3 * d
  head = 2 * (module.representation_size or d) * module.num_classes
  return embedding + module.num_layers * per_layer + head


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


def benchmark_config() -> ml_collections.ConfigDict:
  """The fine-tuning optimizer of the paper: SGD momentum (bf16 buffer), clip 1, cosine."""
  return ml_collections.ConfigDict(dict(
      optimizer="sgd", momentum=0.9, optim_dtype="bfloat16", base_lr=0.01, warmup_steps=10,
      total_steps=1000, decay_type="cosine", grad_norm_clip=1.0, weight_decay=0.0,
      adam_b1=0.9, adam_b2=0.999, accum_steps=1, loss="softmax_xent", label_smoothing=0.0))


def _step_function(module, mode, mesh, batch, image_size):
  """(jitted fn, args) of a train step or of inference, state placed on the mesh."""
  images = jax.random.uniform(jax.random.PRNGKey(2), (batch, image_size, image_size, 3),
                              minval=-1, maxval=1)  # not zeros: those can run faster
  batch_sharding = sharding.batch_sharding(mesh)
  if mode == "infer":
    params = jax.eval_shape(module.init, jax.random.PRNGKey(0), images[:1])["params"]
    param_sharding = sharding.param_shardings(params, mesh)
    params = jax.jit(lambda r: module.init(r, images[:1])["params"],
                     out_shardings=param_sharding)(jax.random.PRNGKey(0))
    fn = jax.jit(lambda p, x: module.apply({"params": p}, x),
                 in_shardings=(param_sharding, batch_sharding))
    return fn, (params, jax.device_put(images, batch_sharding))
  config = benchmark_config()
  optimizer = optim.make_optimizer(config)
  init = lambda r: train_step.create_train_state(module.init(r, images[:1])["params"], optimizer)
  state_sharding = sharding.param_shardings(jax.eval_shape(init, jax.random.PRNGKey(0)), mesh)
  state = jax.jit(init, out_shardings=state_sharding)(jax.random.PRNGKey(0))
  labels = jax.random.randint(jax.random.PRNGKey(3), (batch,), 0, module.num_classes)
  data = jax.device_put({"image": images, "label": labels},
                        batch_sharding)
  fn = jax.jit(train_step.make_train_step(module, optimizer, config),
               in_shardings=(state_sharding, batch_sharding, sharding.replicated(mesh)),
               out_shardings=(state_sharding, sharding.replicated(mesh)), donate_argnums=0)
  return fn, (state, data, jax.random.PRNGKey(1))


def run(model: str, mode: str, batch: int, image_size: int, dtype: str = "float32",
        steps: int = 10, mesh_config: Optional[Dict[str, int]] = None,
        peak_flops: Optional[float] = None, **model_overrides) -> dict:
  """Benchmarks one configuration; returns the numbers as a dict."""
  mesh = sharding.make_mesh(mesh_config or {"data": -1})
  sharding.check_batch_size(batch, mesh)
  module = zoo.create_model(model, num_classes=1000, dtype=jnp.dtype(dtype), **model_overrides)
  fn, args = _step_function(module, mode, mesh, batch, image_size)
  start = time.perf_counter()
  compiled = fn.lower(*args).compile()
  compile_s = time.perf_counter() - start
  times = []  # steps=0: compile only
  for _ in range(steps):
    start = time.perf_counter()
    out = compiled(*args)
    jax.block_until_ready(out)
    times.append(time.perf_counter() - start)
    if mode == "train":
      args = (out[0], *args[1:])
  step_s = statistics.median(times) if times else None
  forward = forward_flops_per_image(module, image_size)
  cost = (compiled.cost_analysis() or {})
  cost = cost[0] if isinstance(cost, list) else cost
  xla_flops = float(cost.get("flops", 0.0)) * jax.device_count() / batch or None
  flops = (3 if mode == "train" else 1) * forward if forward else xla_flops
  peak = peak_flops or measure_peak_flops(jnp.dtype(dtype))
  memory = compiled.memory_analysis()
  device_mib = (memory.argument_size_in_bytes + memory.output_size_in_bytes +
                memory.temp_size_in_bytes - memory.alias_size_in_bytes) / 2**20
  img_per_sec = batch / step_s if step_s else None
  return {
      "model": model, "mode": mode, "batch": batch, "image_size": image_size, "dtype": dtype,
      "attention_impl": vit.attention_backend(module.attention_impl, module.dtype),
      "remat_policy": module.remat_policy,
      "scan_layers": module.scan_layers,
      "devices": jax.device_count(), "platform": jax.devices()[0].platform,
      "compile_s": compile_s, "step_s_median": step_s, "step_s_min": min(times, default=None),
      "step_s_max": max(times, default=None), "img_per_sec": img_per_sec,
      "img_per_sec_per_device": img_per_sec / jax.device_count() if img_per_sec else None,
      "gflop_per_image": flops / 1e9 if flops else None,
      "xla_gflop_per_image": xla_flops / 1e9 if xla_flops else None,
      "peak_tflops_per_device": peak / 1e12,
      "mfu": flops * img_per_sec / (peak * jax.device_count()) if flops and img_per_sec else None,
      "mib_per_device": device_mib,
  }


def _number(value: Optional[float], spec: str) -> str:
  return "-" if value is None else format(value, spec)


def format_row(r: dict) -> str:
  mfu = _number(r["mfu"] and 100 * r["mfu"], ".1f") + ("%" if r["mfu"] else "")
  return (f"{r['model']:<12} {r['mode']:<5} {r['image_size']:>4} {r['batch']:>5} "
          f"{r['dtype']:<8} {r['compile_s']:>8.1f} {_number(r['step_s_median'], '.4f'):>9} "
          f"{_number(r['img_per_sec'], '.1f'):>9} {_number(r['gflop_per_image'], '.1f'):>7} "
          f"{mfu:>6} {r['mib_per_device']:>9.0f}")


HEADER = (f"{'model':<12} {'mode':<5} {'size':>4} {'batch':>5} {'dtype':<8} "
          f"{'compile s':>8} {'step s':>9} {'img/s':>9} {'GFLOP':>7} {'MFU':>6} {'MiB/dev':>9}")


def parse_mesh(text: str) -> Dict[str, int]:
  """'data=-1,fsdp=2' -> {'data': -1, 'fsdp': 2}."""
  return {k.strip(): int(v) for k, v in (part.split("=") for part in text.split(",") if part)}


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--model", default="ViT-B_16")
  parser.add_argument("--mode", choices=("train", "infer"), default="train")
  parser.add_argument("--batch", type=int, default=8)
  parser.add_argument("--image-size", "--image_size", dest="image_size", type=int, default=224)
  parser.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32")
  parser.add_argument("--steps", type=int, default=10, help="timed steps; 0: compile only")
  parser.add_argument("--mesh", type=parse_mesh, default={"data": -1})
  parser.add_argument("--attention", choices=vit.ATTENTION_IMPLS, default="dot_product")
  parser.add_argument("--remat", choices=tuple(vit.REMAT_POLICIES), default="none")
  parser.add_argument("--scan", action="store_true", help="nn.scan over the blocks")
  parser.add_argument("--peak_tflops", type=float, default=None,
                      help="device peak instead of measuring a matmul")
  parser.add_argument("--suite", action="store_true", help="Ti/B/L at 224/384, train+infer")
  parser.add_argument("--time_budget", type=float, default=1800, help="seconds, --suite")
  parser.add_argument("--json", default=None, help="append one JSON object per configuration")
  args = parser.parse_args(argv)
  peak = args.peak_tflops * 1e12 if args.peak_tflops else None
  configs = SUITE if args.suite else [(args.model, args.mode, args.image_size)]
  print(f"{jax.device_count()} x {jax.devices()[0].device_kind}, jax {jax.__version__}")
  print(HEADER)
  started = time.time()
  for model, mode, size in configs:
    if time.time() - started > args.time_budget:
      print(f"time budget of {args.time_budget:.0f} s spent; skipping the rest")
      break
    try:
      result = run(model, mode, args.batch, size, args.dtype, args.steps, args.mesh, peak,
                   attention_impl=args.attention, remat_policy=args.remat,
                   scan_layers=args.scan)
    except jax.errors.JaxRuntimeError as e:
      if "RESOURCE_EXHAUSTED" not in str(e):
        raise
      # One configuration too big for the device: say so and go on with the rest.
      result = {"model": model, "mode": mode, "batch": args.batch, "image_size": size,
                "dtype": args.dtype, "error": "out of memory"}
      print(f"{model:<12} {mode:<5} {size:>4} {args.batch:>5} {args.dtype:<8} out of memory "
            "(try --remat=full, --dtype=bfloat16 or a smaller --batch)", flush=True)
    else:
      print(format_row(result), flush=True)
    if args.json:
      with open(args.json, "a", encoding="utf-8") as f:
        f.write(json.dumps(result) + "\n")


if __name__ == "__main__":
  main()
