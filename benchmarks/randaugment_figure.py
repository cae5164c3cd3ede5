"""Draws docs/figures/randaugment.png: every RandAugment op at M = 5, 10, 15 and 20.

  python benchmarks/randaugment_figure.py [--out=docs/figures/randaugment.png]

The photo is scikit-learn's china.jpg (a 400 x 400 window, area-resized to 224 px, the
training resolution: Translate and Cutout sizes are pixels, not fractions); each op runs
with its sign positive (vit_jax.data.randaugment.apply_op), Cutout's square
centred on the image. Two blocks of 8 ops, one row per op, one column per magnitude.
"""

import argparse
import os

import matplotlib

matplotlib.use("Agg")  # files only: no display needed

import matplotlib.pyplot as plt
import numpy as np
from PIL import Image
from sklearn.datasets import load_sample_image

from vit_jax.data import randaugment

MAGNITUDES = (5, 10, 15, 20)
OUT = os.path.join(os.path.dirname(__file__), "..", "docs", "figures", "randaugment.png")


def photo(size: int = 224) -> np.ndarray:
  window = load_sample_image("china.jpg")[20:420, 120:520]
  return np.asarray(Image.fromarray(window).resize((size, size), Image.BOX))


def draw(image: np.ndarray, path: str) -> None:
  rows = len(randaugment.OPS) // 2
  columns = 2 * len(MAGNITUDES) + 1  # a narrow gap between the blocks
  fig, axes = plt.subplots(rows, columns, figsize=(columns * 1.25, rows * 1.3),
                           gridspec_kw={"width_ratios": [1] * len(MAGNITUDES) + [0.25]
                                        + [1] * len(MAGNITUDES)})
  for row in range(rows):
    axes[row, len(MAGNITUDES)].axis("off")
    for block in range(2):
      name = randaugment.OPS[block * rows + row]
      for k, m in enumerate(MAGNITUDES):
        ax = axes[row, block * (len(MAGNITUDES) + 1) + k]
        ax.imshow(randaugment.apply_op(image, name, m))
        ax.set_xticks([])
        ax.set_yticks([])
        if k == 0:
          ax.set_ylabel(name, fontsize=9)
        if row == 0:
          ax.set_title(f"M={m}", fontsize=9)
  fig.suptitle("RandAugment ops (big_vision's levels, sign +) on china.jpg at 224 px",
               fontsize=11)
  fig.tight_layout()
  fig.savefig(path, dpi=72)
  plt.close(fig)


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--out", default=OUT)
  args = parser.parse_args(argv)
  draw(photo(), args.out)
  print(f"wrote {os.path.normpath(args.out)} ({os.path.getsize(args.out)} bytes)")


if __name__ == "__main__":
  main()
