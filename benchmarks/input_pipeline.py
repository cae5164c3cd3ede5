"""Images/s/core of the input pipeline (read + decode + crop + resize) per preset.

  python benchmarks/input_pipeline.py --images=256 --size=500x375 --crop=384

Writes a generated JPEG folder, then runs the project's real training pipeline
(vit_jax.data.pipeline) over it for each preprocessing preset and prints throughput.
"""

import argparse
import os
import tempfile
import time

from make_jpegs import write_jpegs
from vit_jax import config_defaults as common
from vit_jax.data import pipeline


def measure(root: str, preset: str, crop: int, batch: int, steps: int) -> float:
  """Images per second of the training pipeline, after one warm-up batch."""
  config = common.get_config()
  config.dataset, config.pp.preset, config.pp.crop = root, preset, crop
  config.pp.resize = None
  dataset = pipeline.open_dataset(config)
  batches = dataset.train_batches(batch_size=batch, start_step=0, num_steps=steps + 1, seed=0,
                                  process_index=0, process_count=1)
  next(batches)
  start = time.perf_counter()
  count = sum(len(b["label"]) for b in batches)
  return count / (time.perf_counter() - start)


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--images", type=int, default=256)
  parser.add_argument("--size", default="500x375", help="WIDTHxHEIGHT of the generated JPEGs")
  parser.add_argument("--crop", type=int, default=384)
  parser.add_argument("--batch", type=int, default=32)
  parser.add_argument("--steps", type=int, default=8)
  args = parser.parse_args(argv)
  width, height = (int(v) for v in args.size.split("x"))
  cores = os.cpu_count()
  with tempfile.TemporaryDirectory() as root:
    write_jpegs(root, args.images, 4, width, height, classes=4)
    print(f"{args.images} JPEGs {width}x{height} -> crop {args.crop}, {cores} cores")
    print(f"{'preset':<10} {'img/s':>9} {'img/s/core':>11}")
    for preset in ("inception", "bit"):
      rate = measure(root, preset, args.crop, args.batch, args.steps)
      print(f"{preset:<10} {rate:>9.1f} {rate / cores:>11.1f}", flush=True)


if __name__ == "__main__":
  main()
