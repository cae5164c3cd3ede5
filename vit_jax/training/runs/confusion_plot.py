"""The confusion matrix as a picture: confusion_matrix.png in the workdir and an image in
TensorBoard. Rows are true classes normalised to sum to 1 (each row reads as "where the
examples of this class went", whatever the class sizes), columns the predictions, class
names on both axes. Past GRID_MAX_CLASSES a grid is unreadable, so the picture lists the
most-confused pairs instead (true -> predicted, share of the true class's examples).

Drawn with matplotlib's object API on an Agg canvas: no pyplot state, no display needed.
"""

import io
import warnings
from typing import Sequence

import numpy as np

GRID_MAX_CLASSES = 50
PAIRS_SHOWN = 25
_NUMBERS_MAX_CLASSES = 15  # cells carry their share up to this many classes


def _row_normalised(confusion: np.ndarray) -> np.ndarray:
  totals = confusion.sum(axis=1, keepdims=True)
  return np.divide(confusion, totals, out=np.zeros(confusion.shape), where=totals > 0)


def most_confused_pairs(confusion: np.ndarray, count: int = PAIRS_SHOWN) -> list:
  """[(true, predicted, examples, share of the true class)] of the largest off-diagonal
  counts, largest first (ties: by share, then class order); pairs never confused are left
  out."""
  shares = _row_normalised(confusion)
  off = confusion.astype(np.float64).copy()
  np.fill_diagonal(off, 0)
  true, predicted = np.nonzero(off)
  order = np.lexsort((predicted, true, -shares[true, predicted], -off[true, predicted]))
  return [(int(true[i]), int(predicted[i]), int(off[true[i], predicted[i]]),
           float(shares[true[i], predicted[i]])) for i in order[:count]]


def _grid(figure, confusion: np.ndarray, names: Sequence[str], title: str) -> None:
  shares = _row_normalised(confusion)
  axes = figure.add_subplot()
  image = axes.imshow(shares, cmap="Blues", vmin=0.0, vmax=1.0)
  figure.colorbar(image, ax=axes, fraction=0.046, pad=0.04, label="share of the true class")
  ticks = np.arange(len(names))
  axes.set_xticks(ticks, labels=names, rotation=90, fontsize=8)
  axes.set_yticks(ticks, labels=names, fontsize=8)
  axes.set_xlabel("predicted class")
  axes.set_ylabel("true class")
  axes.set_title(title)
  if len(names) <= _NUMBERS_MAX_CLASSES:
    for (row, column), share in np.ndenumerate(shares):
      if confusion[row].sum():
        axes.text(column, row, f"{share:.2f}", ha="center", va="center", fontsize=7,
                  color="white" if share > 0.5 else "black")


def _pairs(figure, confusion: np.ndarray, names: Sequence[str], title: str) -> None:
  pairs = most_confused_pairs(confusion)
  axes = figure.add_subplot()
  labels = [f"{names[t]} -> {names[p]} ({n})" for t, p, n, _ in pairs]
  axes.barh(np.arange(len(pairs)), [share for *_, share in pairs], color="tab:blue")
  axes.set_yticks(np.arange(len(pairs)), labels=labels, fontsize=8)
  axes.invert_yaxis()
  axes.set_xlabel("share of the true class's examples predicted as the other")
  axes.set_title(f"{title}: the {len(pairs)} most-confused pairs of {len(names)} classes"
                 if pairs else f"{title}: no confusions")


def draw(confusion: np.ndarray, class_names: Sequence[str], title: str) -> np.ndarray:
  """The picture as RGB uint8 [H, W, 3]: the row-normalised grid up to GRID_MAX_CLASSES
  classes, else the most-confused pairs."""
  from matplotlib.backends.backend_agg import FigureCanvasAgg  # only runs that draw need it
  from matplotlib.figure import Figure
  names = [str(name) for name in class_names]
  side = min(16.0, 3.0 + 0.3 * len(names))
  figure = Figure(figsize=(side + 1.5, side) if len(names) <= GRID_MAX_CLASSES else (10, 8),
                  dpi=100, layout="constrained")
  (_grid if len(names) <= GRID_MAX_CLASSES else _pairs)(figure, confusion, names, title)
  canvas = FigureCanvasAgg(figure)
  with warnings.catch_warnings():  # names in scripts the font lacks are drawn as boxes
    warnings.filterwarnings("ignore", "Glyph .* missing from font")
    canvas.draw()
  return np.asarray(canvas.buffer_rgba())[..., :3].copy()


def png_bytes(rgb: np.ndarray) -> bytes:
  from PIL import Image  # pylint: disable=import-outside-toplevel
  buffer = io.BytesIO()
  Image.fromarray(rgb).save(buffer, format="PNG")
  return buffer.getvalue()
