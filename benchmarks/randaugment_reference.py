"""Checks vit_jax.data.randaugment against the TensorFlow reference ops and writes the
golden file that tests/data/test_randaugment.py compares with.

  pip download --no-deps tf-models-official -d /tmp/tfm && unzip -q /tmp/tfm/*.whl -d /tmp/tfm
  python benchmarks/randaugment_reference.py --models=/tmp/tfm [--write]

The reference is the TF Model Garden's official/vision/ops/augment.py (tf-models-official,
the maintained form of big_vision's autoaugment.py ops), used with big_vision's settings
where the two differ:
  * geometric ops fill with constant 0 before unwrap (tensorflow_addons' transform, which
    big_vision called), not the Model Garden's default 'reflect';
  * Contrast is big_vision's (blend with the mean grey level), written here in TF ops;
  * Cutout's random centre is replaced by the one our op draws for the same seed
    (randaugment.cutout_centre), through the Model Garden's _fill_rectangle;
  * the signed arguments (Rotate, Shear, Translate) are float32 tensors, as after
    big_vision's random negation; the golden file has the positive sign, the table both.
Only augment.py and its imports are loaded (no tf_keras, no package __init__s).
Prints a markdown table (max / mean |difference| per op and magnitude, and the time of one
op at 224 px, reference in TF eager vs numpy); --write saves the 64x64 golden file.
"""

import argparse
import importlib
import math
import os
import sys
import time
import types

import numpy as np
import tensorflow as tf
from sklearn.datasets import load_sample_image

from vit_jax.data import randaugment

MAGNITUDES = (0, 5, 10, 15, 20)
GOLDEN = os.path.join(os.path.dirname(__file__), "..", "tests", "data",
                      "randaugment_reference.npz")
GREY = tf.constant([randaugment.FILL] * 3, tf.uint8)


def load_augment(models_root: str):
  """official.vision.ops.augment from an unpacked tf-models-official wheel."""
  sys.modules.setdefault("tf_keras", types.ModuleType("tf_keras"))  # imported, unused
  for name in ("official", "official.vision", "official.vision.ops", "official.vision.configs"):
    package = types.ModuleType(name)
    package.__path__ = [os.path.join(models_root, *name.split("."))]
    sys.modules[name] = package
  common = types.ModuleType("official.vision.configs.common")  # type hints only
  common.__getattr__ = lambda name: object
  sys.modules["official.vision.configs.common"] = common
  return importlib.import_module("official.vision.ops.augment")


def reference_ops(augment):
  """name -> fn(uint8 tensor, magnitude, cutout centre, negate) with big_vision's
  arguments."""
  def fraction(m):
    return m / randaugment.MAX_LEVEL

  def signed(value, negate):  # what big_vision's _randomly_negate_tensor returns
    value = tf.constant(value, tf.float32)
    return -value if negate else value

  def geometric(image, transforms):
    out = augment.transform(augment.wrap(image), transforms, fill_mode="constant")
    return augment.unwrap(out, GREY)

  def rotate(image, m, negate):
    radians = signed(fraction(m) * 30.0, negate) * (math.pi / 180.0)
    height, width = (tf.cast(s, tf.float32) for s in tf.unstack(tf.shape(image)[:2]))
    return geometric(image, augment._convert_angles_to_transform(radians, width, height))

  def translate(image, m, axis, negate):
    pixels = signed(fraction(m) * randaugment.TRANSLATE_CONST, negate)
    shift = [-pixels, 0.0] if axis == 0 else [0.0, -pixels]
    return geometric(image, augment._convert_translation_to_transform(tf.stack(shift)))

  def shear(image, m, axis, negate):
    level = signed(fraction(m) * 0.3, negate)
    row = [1.0, level, 0.0, 0.0, 1.0, 0.0] if axis == 0 else [1.0, 0.0, 0.0, level, 1.0, 0.0]
    return geometric(image, tf.stack(row + [0.0, 0.0]))

  def contrast(image, factor):  # big_vision/pp/archive/autoaugment.py's formula
    grey = tf.cast(tf.image.rgb_to_grayscale(image), tf.int32)
    hist = tf.histogram_fixed_width(grey, [0, 255], nbins=256)
    pixels = tf.cast(tf.shape(image)[0] * tf.shape(image)[1], tf.float32)
    mean = tf.reduce_sum(tf.cast(hist, tf.float32) * tf.linspace(0.0, 255.0, 256)) / pixels
    degenerate = tf.clip_by_value(tf.ones_like(grey, tf.float32) * mean, 0.0, 255.0)
    degenerate = tf.image.grayscale_to_rgb(tf.cast(degenerate, tf.uint8))
    return augment.blend(degenerate, image, factor)

  def enhance(m):
    return fraction(m) * 1.8 + 0.1

  def cutout(image, m, centre, negate):  # pylint: disable=unused-argument
    pad = int(fraction(m) * randaugment.CUTOUT_CONST)
    return augment._fill_rectangle(image, centre[1], centre[0], pad, pad, randaugment.FILL)

  unsigned = {
      "AutoContrast": lambda x, m: augment.autocontrast(x),
      "Equalize": lambda x, m: augment.equalize(x),
      "Invert": lambda x, m: augment.invert(x),
      "Posterize": lambda x, m: augment.posterize(x, int(fraction(m) * 4)),
      "Solarize": lambda x, m: augment.solarize(x, int(fraction(m) * 256)),
      "Color": lambda x, m: augment.color(x, enhance(m)),
      "Contrast": lambda x, m: contrast(x, enhance(m)),
      "Brightness": lambda x, m: augment.brightness(x, enhance(m)),
      "Sharpness": lambda x, m: augment.sharpness(x, enhance(m)),
      "SolarizeAdd": lambda x, m: augment.solarize_add(x, int(fraction(m) * 110)),
  }
  ops = {name: (lambda x, m, c, negate, fn=fn: fn(x, m)) for name, fn in unsigned.items()}
  ops.update({
      "Rotate": lambda x, m, c, negate: rotate(x, m, negate),
      "ShearX": lambda x, m, c, negate: shear(x, m, 0, negate),
      "ShearY": lambda x, m, c, negate: shear(x, m, 1, negate),
      "TranslateX": lambda x, m, c, negate: translate(x, m, 0, negate),
      "TranslateY": lambda x, m, c, negate: translate(x, m, 1, negate),
      "Cutout": cutout,
  })
  return ops


def photo(size: int) -> np.ndarray:
  """A size x size crop of scikit-learn's china.jpg (roof, sky and trees), area-resized
  for the large sizes so that the content stays comparable."""
  china = load_sample_image("china.jpg")  # 427 x 640
  if size <= 64:
    return np.ascontiguousarray(china[120:120 + size, 330:330 + size])
  return tf.cast(tf.image.resize(china[:, 100:527], [size, size], "area"), tf.uint8).numpy()


def compare(ops, image: np.ndarray):
  """{(row, M): (reference output, max |diff|, mean |diff|, share of values differing)};
  rows are the ops, and the signed ones again with their sign negative ("Rotate -")."""
  results = {}
  rows = [(name, False) for name in randaugment.OPS]
  rows += [(name, True) for name in randaugment.GEOMETRIC]
  for name, negate in rows:
    for m in MAGNITUDES:
      centre = randaugment.cutout_centre(image.shape, m)
      want = ops[name](tf.constant(image), float(m), centre, negate).numpy()
      got = (randaugment.apply_op(image, name, m, seed=m) if not negate
             else randaugment._apply(image, name, float(m), True, centre))
      diff = np.abs(want.astype(int) - got.astype(int))
      row = name + (" -" if negate else "")
      results[row, m] = want, int(diff.max()), float(diff.mean()), float((diff > 0).mean())
  return results


def timings(ops, image: np.ndarray, repeats: int):
  """{op: (reference ms, numpy ms)} at M=15, best of `repeats`."""
  out = {}
  for name in randaugment.OPS:
    reference = tf.function(lambda x, name=name: ops[name](x, 15.0, (100, 100), False))
    tensor = tf.constant(image)
    reference(tensor)
    best = [math.inf, math.inf]
    for _ in range(repeats):
      start = time.perf_counter()
      reference(tensor).numpy()
      best[0] = min(best[0], time.perf_counter() - start)
      start = time.perf_counter()
      randaugment.apply_op(image, name, 15, seed=0)
      best[1] = min(best[1], time.perf_counter() - start)
    out[name] = tuple(1e3 * b for b in best)
  return out


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--models", required=True,
                      help="folder holding the unpacked tf-models-official 'official' package")
  parser.add_argument("--write", action="store_true", help=f"write {GOLDEN}")
  parser.add_argument("--repeats", type=int, default=20)
  args = parser.parse_args(argv)
  ops = reference_ops(load_augment(args.models))
  small, large = photo(64), photo(224)
  for label, image in (("64x64 crop", small), ("224x224", large)):
    results = compare(ops, image)
    print(f"\n{label} of china.jpg: max / mean |ours - reference| (share of values differing)")
    print("| op | " + " | ".join(f"M={m}" for m in MAGNITUDES) + " |")
    print("|---|" + "---|" * len(MAGNITUDES))
    for row in dict.fromkeys(row for row, _ in results):
      cells = [f"{results[row, m][1]} / {results[row, m][2]:.4f} ({results[row, m][3]:.2%})"
               for m in MAGNITUDES]
      print(f"| {row} | " + " | ".join(cells) + " |")
    if args.write and image is small:
      golden = {f"{name}_{m}": results[name, m][0] for name in randaugment.OPS
                for m in MAGNITUDES}
      np.savez_compressed(GOLDEN, image=small, **golden)
      print(f"wrote {os.path.normpath(GOLDEN)} ({os.path.getsize(GOLDEN)} bytes)")
  print(f"\nms per op at 224 px, M=15, best of {args.repeats} (reference: tf.function; "
        "ours: numpy)")
  print("| op | reference TF | numpy |")
  print("|---|---|---|")
  for name, (ref_ms, np_ms) in timings(ops, large, args.repeats).items():
    print(f"| {name} | {ref_ms:.2f} | {np_ms:.2f} |")


if __name__ == "__main__":
  main()
