"""Writes an image folder of generated JPEGs for timing the input pipeline and the main job
on real files (no download): DIR/train/classK/*.jpg and DIR/test/classK/*.jpg.

  python benchmarks/make_jpegs.py /tmp/jpegs                      # 20,000 + 1,000 at 500x375
  python benchmarks/make_jpegs.py /tmp/jpegs --train=256 --test=16 --size=500x375

Each image is smooth colour noise (a random 1/16-size image resized up) saved at JPEG
quality 90: about the size and decode cost of an ImageNet photo (~500x375, 30-60 KB). The
content is random, so a model cannot learn it; this is for speed, not accuracy. Uses every
core; a folder that already holds the requested files is left as it is.
"""

import argparse
import multiprocessing
import os

import numpy as np
from PIL import Image


def write_one(task) -> None:
  path, width, height, seed = task
  rng = np.random.default_rng(seed)
  small = rng.uniform(0, 255, (height // 16 + 1, width // 16 + 1, 3)).astype(np.uint8)
  partial = f"{path}.partial"
  Image.fromarray(small).resize((width, height), Image.BILINEAR).save(
      partial, format="JPEG", quality=90)
  os.replace(partial, path)  # a killed run never leaves a truncated .jpg behind


def write_jpegs(root: str, train: int, test: int, width: int, height: int,
                classes: int = 10) -> int:
  """Writes the missing files of root/{train,test}/class<k>/<i>.jpg; returns how many."""
  tasks = []
  for split, count, offset in (("train", train, 0), ("test", test, train)):
    for i in range(count):
      folder = os.path.join(root, split, f"class{i % classes}")
      os.makedirs(folder, exist_ok=True)
      path = os.path.join(folder, f"{i}.jpg")
      if not os.path.exists(path):
        tasks.append((path, width, height, offset + i))
  with multiprocessing.Pool() as pool:
    pool.map(write_one, tasks, chunksize=64)
  return len(tasks)


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("root", help="the folder to write (created if missing)")
  parser.add_argument("--train", type=int, default=20_000, help="training images")
  parser.add_argument("--test", type=int, default=1_000, help="test images")
  parser.add_argument("--classes", type=int, default=10)
  parser.add_argument("--size", default="500x375", help="WIDTHxHEIGHT (default %(default)s)")
  args = parser.parse_args(argv)
  try:
    width, height = (int(v) for v in args.size.lower().split("x"))
  except ValueError:
    parser.error(f"--size={args.size} must be WIDTHxHEIGHT, e.g. 500x375")
  if min(args.train, args.test, args.classes, width, height) < 1:
    parser.error("--train, --test, --classes and --size must be positive")
  written = write_jpegs(args.root, args.train, args.test, width, height, args.classes)
  print(f"{args.root}: {args.train} train + {args.test} test JPEGs of {width}x{height} in "
        f"{args.classes} classes ({written} written now)")


if __name__ == "__main__":
  main()
