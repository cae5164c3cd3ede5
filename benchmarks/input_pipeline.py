"""Images/s/core of the input pipeline (read + decode + crop + resize) per preset.

  python benchmarks/input_pipeline.py --images=256 --size=500x375 --crop=384
  python benchmarks/input_pipeline.py --crop=224 --loader=tf,grain --randaug=2,15 --one_core

Writes a generated JPEG folder, then runs the project's real training pipeline
(config.loader's: tf.data, vit_jax.data.tf_stack.tf_pipeline, or Grain, vit_jax.data.grain_stack.grain_pipeline)
over it for each preprocessing preset and prints throughput. --randaug=N,M adds each preset
with config.pp.randaug=(N, M). On the CPU backend tf.data runs on one thread
(pipeline.host_threading); --threads=K gives it K (all cores by default, as on an
accelerator host). --one_core pins the process to one core, so that loaders with different
threading compare per core. img/CPU-s divides by the CPU time this process used (the
per-core rate, also on a machine that other jobs share; Grain's worker processes, with
--grain_workers > 0, are not counted). A last row times randaugment() alone on random crops.
"""

import argparse
import os
import tempfile
import time

import numpy as np

from make_jpegs import write_jpegs
from vit_jax.data import loaders, randaugment
from vit_jax.training import config_defaults as common


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


def measure(root: str, preset: str, crop: int, batch: int, steps: int, loader: str = "tf",
            workers: int = 0, randaug=None):
  """(images per second, images per CPU-second of this process) of the training pipeline,
  after one warm-up batch."""
  config = common.get_config()
  config.dataset, config.pp.preset, config.pp.crop = root, preset, crop
  config.pp.resize = None
  config.pp.randaug = randaug
  config.loader, config.grain_workers = loader, workers
  dataset = loaders.open_dataset(config)
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
  parser.add_argument("--loader", default="tf", help="tf, grain or both: tf,grain")
  parser.add_argument("--grain_workers", type=int, default=0)
  parser.add_argument("--randaug", default=None, help="N,M: also time pp.randaug=(N, M)")
  parser.add_argument("--threads", type=int, default=None,
                      help="tf.data threads (default: every core the process may use)")
  parser.add_argument("--one_core", action="store_true", help="pin to core 0")
  args = parser.parse_args(argv)
  width, height = (int(v) for v in args.size.split("x"))
  randaugs = [None] + ([tuple(int(v) for v in args.randaug.split(","))] if args.randaug else [])
  if args.one_core:
    os.sched_setaffinity(0, {0})
  cores = len(os.sched_getaffinity(0))
  loader_names = args.loader.split(",")
  if "tf" in loader_names:
    use_tf_threads(args.threads or cores)
  with tempfile.TemporaryDirectory() as root:
    write_jpegs(root, args.images, 4, width, height, classes=4)
    print(f"{args.images} JPEGs {width}x{height} -> crop {args.crop}, {cores} cores")
    print(f"{'loader':<7} {'preset':<10} {'randaug':<8} {'img/s':>9} {'img/s/core':>11} "
          f"{'img/CPU-s':>10}")
    for loader in loader_names:
      for preset in ("inception", "bit"):
        for randaug in randaugs:
          rate, per_cpu = measure(root, preset, args.crop, args.batch, args.steps, loader,
                                  args.grain_workers, randaug)
          label = "-" if randaug is None else ",".join(map(str, randaug))
          print(f"{loader:<7} {preset:<10} {label:<8} {rate:>9.1f} {rate / cores:>11.1f} "
                f"{per_cpu:>10.1f}", flush=True)
  for randaug in randaugs[1:]:
    per_cpu = randaug_alone(args.crop, randaug)
    print(f"{'numpy op':<18} {','.join(map(str, randaug)):<8} {'':>9} {'':>11} {per_cpu:>10.1f}"
          "  (randaugment() alone, one thread)")


if __name__ == "__main__":
  main()
