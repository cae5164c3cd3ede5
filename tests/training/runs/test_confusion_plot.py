"""confusion_matrix.png: drawn, readable, a grid up to 50 classes and the most-confused
pairs past that."""

import io

import numpy as np
from PIL import Image

from vit_jax.training.runs import confusion_plot


def test_a_small_grid_is_drawn_as_a_readable_png():
  confusion = np.array([[5, 1, 0], [0, 0, 0], [2, 2, 6]])
  rgb = confusion_plot.draw(confusion, ["cat", "dog", "a much longer name"], "eval/test")
  assert rgb.dtype == np.uint8 and rgb.ndim == 3 and rgb.shape[2] == 3
  image = Image.open(io.BytesIO(confusion_plot.png_bytes(rgb)))
  assert image.format == "PNG" and image.size == (rgb.shape[1], rgb.shape[0])
  np.testing.assert_array_equal(np.asarray(image.convert("RGB")), rgb)
  assert len(np.unique(rgb.reshape(-1, 3), axis=0)) > 20  # drawn, not blank


def test_most_confused_pairs_by_count_then_share():
  confusion = np.diag([9, 9, 9, 9]).astype(float)
  confusion[0, 1], confusion[2, 3], confusion[3, 0], confusion[1, 2] = 3, 3, 1, 2
  confusion[2, 2] = 1  # class 2's 3 confusions are a larger share than class 0's
  assert confusion_plot.most_confused_pairs(confusion, count=3) == [
      (2, 3, 3, 0.75), (0, 1, 3, 0.25), (1, 2, 2, 2 / 11)]


def test_past_fifty_classes_the_picture_lists_pairs():
  rng = np.random.default_rng(0)
  confusion = rng.integers(0, 3, (60, 60)) + np.diag(np.full(60, 20))
  names = [f"class {i}" for i in range(60)]
  rgb = confusion_plot.draw(confusion, names, "eval/test")
  assert rgb.shape[:2] == (800, 1000)  # the pairs chart's fixed size, not a 60x60 grid
  assert len(confusion_plot.most_confused_pairs(confusion)) == confusion_plot.PAIRS_SHOWN
