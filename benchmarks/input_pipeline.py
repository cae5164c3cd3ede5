"""Images/s/core of the input pipeline (read + decode + crop + resize) per preset.

  python benchmarks/input_pipeline.py --images=256 --size=500x375 --crop=384
  python benchmarks/input_pipeline.py --crop=224 --loader=tf,grain --one_core

Writes a generated JPEG folder, then runs the project's real training pipeline
(config.loader's: tf.data, vit_jax.data.pipeline, or Grain, vit_jax.data.grain_pipeline)
over it for each preprocessing preset and prints throughput. --one_core pins the process
to one core, so that loaders with different threading compare per core.
"""

import argparse
import os
import tempfile
import time

from make_jpegs import write_jpegs
from vit_jax import config_defaults as common
from vit_jax.data import loaders


def measure(root: str, preset: str, crop: int, batch: int, steps: int, loader: str = "tf",
            workers: int = 0):
  """(images per second, images per CPU-second of this process: what a shared machine's
  other jobs do not change; worker processes are not counted) of the training pipeline,
  after one warm-up batch."""
  config = common.get_config()
  config.dataset, config.pp.preset, config.pp.crop = root, preset, crop
  config.pp.resize = None
  config.loader, config.grain_workers = loader, workers
  dataset = loaders.open_dataset(config)
  batches = dataset.train_batches(batch_size=batch, start_step=0, num_steps=steps + 1, seed=0,
                                  process_index=0, process_count=1)
  next(batches)
  start, cpu = time.perf_counter(), time.process_time()
  count = sum(len(b["label"]) for b in batches)
  return count / (time.perf_counter() - start), count / (time.process_time() - cpu)


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--images", type=int, default=256)
  parser.add_argument("--size", default="500x375", help="WIDTHxHEIGHT of the generated JPEGs")
  parser.add_argument("--crop", type=int, default=384)
  parser.add_argument("--batch", type=int, default=32)
  parser.add_argument("--steps", type=int, default=8)
  parser.add_argument("--loader", default="tf", help="tf, grain or both: tf,grain")
  parser.add_argument("--grain_workers", type=int, default=0)
  parser.add_argument("--one_core", action="store_true", help="pin to core 0")
  args = parser.parse_args(argv)
  width, height = (int(v) for v in args.size.split("x"))
  if args.one_core:
    os.sched_setaffinity(0, {0})
  cores = len(os.sched_getaffinity(0))
  with tempfile.TemporaryDirectory() as root:
    write_jpegs(root, args.images, 4, width, height, classes=4)
    print(f"{args.images} JPEGs {width}x{height} -> crop {args.crop}, {cores} cores")
    print(f"{'loader':<7} {'preset':<10} {'img/s':>9} {'img/s/core':>11} {'img/cpu-s':>10}")
    for loader in args.loader.split(","):
      for preset in ("inception", "bit"):
        rate, cpu_rate = measure(root, preset, args.crop, args.batch, args.steps, loader,
                                 args.grain_workers)
        print(f"{loader:<7} {preset:<10} {rate:>9.1f} {rate / cores:>11.1f} {cpu_rate:>10.1f}",
              flush=True)


if __name__ == "__main__":
  main()
