"""An image folder of mixed aspect ratios for NaFlex tests (loaders, export, the main
job): train/ and test/ of three colour classes, each image a noisy tint of its class's
colour (a tiny model learns it in a few steps) at one of several shapes, tall, wide and
square, shared by every class (the shape says nothing of the label). PNG: both loaders
decode the same pixels."""

import pathlib

import numpy as np
from PIL import Image

CLASSES = ("blue", "green", "red")
# (height, width) in pixels: 2:1, 1:2.4, square, odd sides, one under a 16 px patch.
SHAPES = ((40, 20), (20, 48), (33, 33), (17, 29), (48, 16), (24, 40), (12, 36))
TRAIN_PER_CLASS, TEST_PER_CLASS = 10, 4


def _image(rng: np.random.Generator, label: int, shape) -> np.ndarray:
  """uint8 [H, W, 3]: the class's channel bright, the others dim, noise on all."""
  tint = np.full(3, 60.0)
  tint[2 - label] = 190.0  # blue, green, red: channels 2, 1, 0
  pixels = tint + rng.normal(0, 30, (*shape, 3))
  return np.clip(pixels, 0, 255).astype(np.uint8)


def write_mixed_aspect_folder(root) -> pathlib.Path:
  """ROOT/{train,test}/{blue,green,red}/NN.png (42 images, shapes cycling through SHAPES
  within each class); returns ROOT."""
  root = pathlib.Path(root)
  rng = np.random.default_rng(50)
  for split, count in (("train", TRAIN_PER_CLASS), ("test", TEST_PER_CLASS)):
    for label, name in enumerate(CLASSES):
      folder = root / split / name
      folder.mkdir(parents=True, exist_ok=True)
      for i in range(count):
        shape = SHAPES[(i + label) % len(SHAPES)]
        Image.fromarray(_image(rng, label, shape)).save(folder / f"{i:02d}.png")
  return root
