"""Writes a multi-label image folder of coloured shapes: DIR/train and DIR/test, each with
its PNGs and a labels.csv whose labels are the colours present in the image.

  python benchmarks/make_shapes.py /tmp/shapes                    # 4,000 + 500 at 32 px
  python -m vit_jax.main --config=configs/demo.py:/tmp/shapes --workdir=/tmp/shapes_run

Each image has 0 to 3 shapes (disc, square or triangle: the shape is not a label) of
distinct colours, one per quadrant so that none hides another, on a noisy dark background;
about 1 image in 12 has none (an all-negative example). A colour can be learned from a
few pixels, so the demo model reaches a high mAP in minutes on a CPU.
"""

import argparse
import csv
import os

import numpy as np
from PIL import Image, ImageDraw

COLOURS = {"red": (220, 30, 30), "green": (30, 200, 40), "blue": (40, 60, 230),
           "yellow": (230, 220, 30), "magenta": (220, 40, 220), "cyan": (40, 220, 220)}


def draw(rng: np.random.Generator, size: int):
  """(an RGB image [size, size, 3], the sorted colour names in it)."""
  background = rng.integers(0, 60, (size, size, 3)).astype(np.uint8)
  image = Image.fromarray(background)
  pen = ImageDraw.Draw(image)
  count = rng.choice(4, p=[1 / 12, 11 / 36, 11 / 36, 11 / 36])
  names = rng.choice(sorted(COLOURS), count, replace=False)
  cell = size // 2
  for name, quadrant in zip(names, rng.choice(4, count, replace=False)):
    cx = (quadrant % 2) * cell + cell // 2 + rng.integers(-cell // 8, cell // 8 + 1)
    cy = (quadrant // 2) * cell + cell // 2 + rng.integers(-cell // 8, cell // 8 + 1)
    r = int(rng.integers(cell // 4, cell // 3 + 1))
    box = [cx - r, cy - r, cx + r, cy + r]
    kind = rng.integers(3)
    if kind == 0:
      pen.ellipse(box, fill=COLOURS[name])
    elif kind == 1:
      pen.rectangle(box, fill=COLOURS[name])
    else:
      pen.polygon([(cx, cy - r), (cx - r, cy + r), (cx + r, cy + r)], fill=COLOURS[name])
  return np.asarray(image), sorted(names)


def write_shapes(root: str, train: int = 4000, test: int = 500, size: int = 32,
                 seed: int = 0) -> None:
  """root/train and root/test, with images in two subfolders (any layout is read)."""
  rng = np.random.default_rng(seed)
  for split, count in (("train", train), ("test", test)):
    rows = []
    for i in range(count):
      pixels, names = draw(rng, size)
      relative = os.path.join(f"part{i % 2}", f"{i:05d}.png")
      os.makedirs(os.path.join(root, split, f"part{i % 2}"), exist_ok=True)
      Image.fromarray(pixels).save(os.path.join(root, split, relative))
      rows.append([relative, ";".join(names)])
    with open(os.path.join(root, split, "labels.csv"), "w", newline="") as f:
      csv.writer(f).writerows([["path", "labels"], *rows])


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("root")
  parser.add_argument("--train", type=int, default=4000)
  parser.add_argument("--test", type=int, default=500)
  parser.add_argument("--size", type=int, default=32)
  parser.add_argument("--seed", type=int, default=0)
  args = parser.parse_args()
  write_shapes(args.root, args.train, args.test, args.size, args.seed)
  print(f"wrote {args.train} + {args.test} images to {args.root}")


if __name__ == "__main__":
  main()
