"""Images per CPU-second of the training input pipeline: tf.data against Grain, side by side.

  python benchmarks/input_pipeline.py --crop=224 --randaug=2,15 --workers=1,2
  python benchmarks/input_pipeline.py --images=256 --size=500x375 --crop=384 --loader=tf

Writes a generated JPEG folder (make_jpegs.py), then runs the project's real training
pipeline (config.loader's: tf.data, vit_jax.data.tf_stack.tf_pipeline, or Grain,
vit_jax.data.grain_stack.grain_pipeline) over it for each preset (inception, bit), without and with
--randaug=N,M, at each of --workers: tf.data's private thread pool of that many threads,
Grain's that many worker processes (0: Grain's threads in this process). img/CPU-s is
images per CPU-second of this process and of its child processes (Grain's workers), after
a warm-up batch: the per-core cost, which other jobs on a shared machine do not change
(wall-clock img/s does). --plan names a row of tpu_plan.jsonl whose per-host demand is
divided by each rate (the cores one host needs). A last row times randaugment() alone.
"""

import argparse
import json
import os
import tempfile
import time

import numpy as np
import psutil

from make_jpegs import write_jpegs
from vit_jax.data import loaders, randaugment
from vit_jax.training import config_defaults as common

PLANS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tpu_plan.jsonl")
DEFAULT_PLAN = "big_vision vit_s16_i1k"


def use_tf_threads(threads: int) -> None:
  """tf.data on `threads` threads, whatever the JAX backend (imports TensorFlow)."""
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  from vit_jax.data.tf_stack import tf_pipeline  # pylint: disable=import-outside-toplevel

  def options():
    opts = tf.data.Options()
    opts.threading.private_threadpool_size = threads
    opts.threading.max_intra_op_parallelism = 1
    return opts
  tf_pipeline.host_threading = options


def cpu_seconds() -> float:
  """CPU time of this process and its live and finished children (Grain's workers)."""
  me = psutil.Process()
  total = sum(me.cpu_times()[:4])  # user, system, children's user and system (waited)
  for child in me.children(recursive=True):
    try:
      total += sum(child.cpu_times()[:2])
    except psutil.NoSuchProcess:
      pass
  return total


def measure(root: str, preset: str, crop: int, batch: int, steps: int, loader: str,
            workers: int, randaug=None):
  """(images per second, images per CPU-second) of the training pipeline after a
  warm-up batch."""
  config = common.get_config()
  config.dataset, config.pp.preset, config.pp.crop = root, preset, crop
  config.pp.resize = None
  config.pp.randaug = randaug
  config.loader = loader
  config.grain_workers = workers if loader == "grain" else 0
  if loader == "tf":
    use_tf_threads(workers)
  dataset = loaders.open_dataset(config)
  batches = dataset.train_batches(batch_size=batch, start_step=0, num_steps=steps + 1, seed=0,
                                  process_index=0, process_count=1)
  next(batches)
  start, cpu = time.perf_counter(), cpu_seconds()
  count = 0
  for b in batches:
    count += len(b["label"])
    end, end_cpu = time.perf_counter(), cpu_seconds()  # before the workers shut down
  return count / (end - start), count / (end_cpu - cpu)


def randaug_alone(crop: int, randaug, images: int = 200) -> float:
  """Images per CPU second of randaugment() alone on one thread (the op cost, no decode)."""
  rng = np.random.default_rng(0)
  crops = [rng.integers(0, 256, (crop, crop, 3), np.uint8) for _ in range(8)]
  randaugment.randaugment(crops[0], *randaug, 0)
  start = time.process_time()
  for i in range(images):
    randaugment.randaugment(crops[i % 8], *randaug, i)
  return images / (time.process_time() - start)


def host_demand(plan: str):
  """(images per second one host must deliver, label) of a tpu_plan.jsonl row: the
  compiler's train rate over the slice's hosts (4 chips each)."""
  with open(PLANS, encoding="utf-8") as rows:
    for line in rows:
      row = json.loads(line)
      rate = (row.get("train") or {}).get("estimated_img_per_sec")
      if row["name"].startswith(plan) and rate:
        hosts = max(1, row["chips"] // 4)
        return rate / hosts, f"{row['name']} on {row['slice']} ({hosts} host(s))"
  raise SystemExit(f"--plan={plan!r}: no row of {PLANS} with a train rate has that name")


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--images", type=int, default=256)
  parser.add_argument("--size", default="500x375", help="WIDTHxHEIGHT of the generated JPEGs")
  parser.add_argument("--crop", type=int, default=224)
  parser.add_argument("--batch", type=int, default=32)
  parser.add_argument("--steps", type=int, default=8)
  parser.add_argument("--loader", default="tf,grain", help="tf, grain or both: tf,grain")
  parser.add_argument("--presets", default="inception,bit")
  parser.add_argument("--workers", default="1", help="comma-separated: tf.data threads, "
                      "Grain worker processes (0: in-process threads)")
  parser.add_argument("--randaug", default="2,15", help="N,M: also time pp.randaug=(N, M); "
                      "'' for none")
  parser.add_argument("--plan", default=DEFAULT_PLAN, help="tpu_plan.jsonl row name prefix")
  args = parser.parse_args(argv)
  width, height = (int(v) for v in args.size.split("x"))
  randaugs = [None] + ([tuple(int(v) for v in args.randaug.split(","))] if args.randaug else [])
  demand, plan_label = host_demand(args.plan)
  with tempfile.TemporaryDirectory() as root:
    write_jpegs(root, args.images, 4, width, height, classes=4)
    print(f"{args.images} JPEGs {width}x{height} -> {args.crop} px, "
          f"{len(os.sched_getaffinity(0))} cores; host demand {demand:,.0f} img/s: {plan_label}")
    print(f"{'loader':<6} {'preset':<10} {'randaug':<8} {'workers':>7} {'img/s':>8} "
          f"{'img/CPU-s':>10} {'host cores':>10}")
    for loader in args.loader.split(","):
      for preset in args.presets.split(","):
        for randaug in randaugs:
          for workers in (int(w) for w in args.workers.split(",")):
            if loader == "tf" and workers == 0:
              continue  # tf.data has no in-process mode apart from its threads
            rate, per_cpu = measure(root, preset, args.crop, args.batch, args.steps, loader,
                                    workers, randaug)
            label = "-" if randaug is None else ",".join(map(str, randaug))
            print(f"{loader:<6} {preset:<10} {label:<8} {workers:>7} {rate:>8.1f} "
                  f"{per_cpu:>10.1f} {demand / per_cpu:>10.1f}", flush=True)
  for randaug in randaugs[1:]:
    per_cpu = randaug_alone(args.crop, randaug)
    print(f"randaugment() alone {','.join(map(str, randaug))}: {per_cpu:.1f} img/CPU-s")


if __name__ == "__main__":
  main()
