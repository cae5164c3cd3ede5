"""Images/s/core of the input pipeline (read + decode + crop + resize) per preset.

  python benchmarks/input_pipeline.py --images=256 --size=500x375 --crop=384
  python benchmarks/input_pipeline.py --crop=224 --randaug=2,15 --threads=1

Writes a generated JPEG folder, then runs the project's real training pipeline
(vit_jax.data.pipeline) over it for each preprocessing preset and prints throughput.
--randaug=N,M adds each preset with config.pp.randaug=(N, M). On the CPU backend the
pipeline runs tf.data on one thread (pipeline.host_threading); --threads=K gives it K
(all cores by default, as on an accelerator host): img/s/thread divides by K, and
img/CPU-s divides by the CPU time the process used (the per-core rate, also on a machine
that other jobs share). A last row times randaugment() alone on random crops.
"""

import argparse
import os
import tempfile
import time

import numpy as np
import tensorflow as tf

from make_jpegs import write_jpegs
from vit_jax import config_defaults as common
from vit_jax.data import pipeline, randaugment


def use_threads(threads: int) -> None:
  """tf.data on `threads` threads, whatever the JAX backend."""
  def options():
    opts = tf.data.Options()
    opts.threading.private_threadpool_size = threads
    opts.threading.max_intra_op_parallelism = 1
    return opts
  pipeline.host_threading = options


def measure(root: str, preset: str, crop: int, batch: int, steps: int, randaug=None):
  """(images per second, images per CPU second) of the training pipeline, after one
  warm-up batch. CPU seconds are the process's (every thread): on a shared machine they
  give the per-core rate that wall time, slowed by other jobs, does not."""
  config = common.get_config()
  config.dataset, config.pp.preset, config.pp.crop = root, preset, crop
  config.pp.resize = None
  config.pp.randaug = randaug
  dataset = pipeline.open_dataset(config)
  batches = dataset.train_batches(batch_size=batch, start_step=0, num_steps=steps + 1, seed=0,
                                  process_index=0, process_count=1)
  next(batches)
  start, cpu = time.perf_counter(), time.process_time()
  count = sum(len(b["label"]) for b in batches)
  return count / (time.perf_counter() - start), count / (time.process_time() - cpu)


def randaug_alone(crop: int, randaug, images: int = 200) -> float:
  """Images per CPU second of randaugment() alone on one thread (the op cost, no decode)."""
  rng = np.random.default_rng(0)
  crops = [rng.integers(0, 256, (crop, crop, 3), np.uint8) for _ in range(8)]
  start = time.process_time()
  for i in range(images):
    randaugment.randaugment(crops[i % 8], *randaug, i)
  return images / (time.process_time() - start)


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--images", type=int, default=256)
  parser.add_argument("--size", default="500x375", help="WIDTHxHEIGHT of the generated JPEGs")
  parser.add_argument("--crop", type=int, default=384)
  parser.add_argument("--batch", type=int, default=32)
  parser.add_argument("--steps", type=int, default=8)
  parser.add_argument("--randaug", default=None, help="N,M: also time pp.randaug=(N, M)")
  parser.add_argument("--threads", type=int, default=os.cpu_count(),
                      help="tf.data threads (default: every core)")
  args = parser.parse_args(argv)
  width, height = (int(v) for v in args.size.split("x"))
  randaugs = [None] + ([tuple(int(v) for v in args.randaug.split(","))] if args.randaug else [])
  use_threads(args.threads)
  with tempfile.TemporaryDirectory() as root:
    write_jpegs(root, args.images, 4, width, height, classes=4)
    print(f"{args.images} JPEGs {width}x{height} -> crop {args.crop}, {args.threads} tf.data "
          f"threads on {os.cpu_count()} cores")
    print(f"{'preset':<10} {'randaug':<8} {'img/s':>9} {'img/s/thread':>13} {'img/CPU-s':>10}")
    for preset in ("inception", "bit"):
      for randaug in randaugs:
        rate, per_cpu = measure(root, preset, args.crop, args.batch, args.steps, randaug)
        label = "-" if randaug is None else ",".join(map(str, randaug))
        print(f"{preset:<10} {label:<8} {rate:>9.1f} {rate / args.threads:>13.1f} "
              f"{per_cpu:>10.1f}", flush=True)
  for randaug in randaugs[1:]:
    per_cpu = randaug_alone(args.crop, randaug)
    print(f"{'numpy op':<10} {','.join(map(str, randaug)):<8} {'':>9} {'':>13} {per_cpu:>10.1f}"
          "  (randaugment() alone, one thread)")


if __name__ == "__main__":
  main()
