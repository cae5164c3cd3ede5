"""Step time and per-device memory of a real train step under each mesh layout.

  XLA_FLAGS=--xla_force_host_platform_device_count=8 \
    python benchmarks/sharding_layouts.py --model=ViT-B_16 --batch=16 --image_size=224

Memory is XLA's compile-time account per device (arguments + temporaries), which is
what decides whether a layout fits; step time is the median over --steps steps.
"""

import argparse
import statistics
import time

import jax
import jax.numpy as jnp
import ml_collections


from vit_jax.models import family_registry
from vit_jax.training import sharding, state_and_step

LAYOUTS = {"data=8": {"data": -1}, "data=4 x fsdp=2": {"data": 4, "fsdp": 2},
           "data=2 x tensor=4": {"data": 2, "tensor": 4}, "fsdp=8": {"fsdp": -1}}


def finetune_config(total_steps: int, image_size: int) -> ml_collections.ConfigDict:
  return ml_collections.ConfigDict(dict(
      optimizer="sgd", momentum=0.9, optim_dtype="bfloat16", base_lr=0.03, warmup_steps=1,
      total_steps=total_steps, decay_type="cosine", grad_norm_clip=1.0, weight_decay=0.0,
      adam_b1=0.9, adam_b2=0.999, accum_steps=1, loss="softmax_xent", label_smoothing=0.0,
      polyak_decay=0.0, objective="classification", pp={"crop": image_size}))


def measure(module, config, layout, batch_size, image_size, steps):
  mesh = sharding.make_mesh(layout)
  sharding.check_model_tensor_parallel(module, mesh)
  images = jnp.zeros((batch_size, image_size, image_size, 3))
  run = state_and_step.build(config, module, mesh)
  state = run.init(jax.random.PRNGKey(0))
  batch = jax.device_put({"image": images, "label": jnp.zeros((batch_size,), jnp.int32)},
                         sharding.batch_sharding(mesh))
  schedule = run.placed_schedule()
  start = time.perf_counter()
  compiled = run.step.lower(state, batch, jax.random.PRNGKey(1), schedule).compile()
  compile_s = time.perf_counter() - start
  memory = compiled.memory_analysis()
  per_device = (memory.argument_size_in_bytes + memory.temp_size_in_bytes) / 2**20
  times = []
  for _ in range(steps):
    start = time.perf_counter()
    state, metrics = compiled(state, batch, jax.random.PRNGKey(1), schedule)
    jax.block_until_ready(metrics)
    times.append(time.perf_counter() - start)
  return compile_s, statistics.median(times), per_device


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--model", default="ViT-B_16")
  parser.add_argument("--batch", type=int, default=16)
  parser.add_argument("--image_size", type=int, default=224)
  parser.add_argument("--steps", type=int, default=3)
  args = parser.parse_args()
  module = family_registry.create_model(args.model, num_classes=1000)
  config = finetune_config(args.steps + 1, args.image_size)
  print(f"{args.model}, batch {args.batch} at {args.image_size} px, {jax.device_count()} "
        f"{jax.devices()[0].platform} devices, jax {jax.__version__}")
  print(f"{'layout':<20} {'compile s':>10} {'step s':>8} {'img/s':>8} {'MiB/device':>11}")
  for name, layout in LAYOUTS.items():
    compile_s, step_s, mib = measure(module, config, layout, args.batch, args.image_size,
                                     args.steps)
    print(f"{name:<20} {compile_s:>10.1f} {step_s:>8.2f} {args.batch / step_s:>8.1f} "
          f"{mib:>11.0f}", flush=True)


if __name__ == "__main__":
  main()
