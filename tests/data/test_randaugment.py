"""RandAugment's numpy ops: equal to the TensorFlow reference (a golden file written by
benchmarks/randaugment_reference.py), the reference's uint8 traps, the seeded policy."""

import os
import subprocess
import sys

import numpy as np
import pytest

from helpers import subprocess_env
from vit_jax.data import randaugment

GOLDEN = os.path.join(os.path.dirname(__file__), "randaugment_reference.npz")


@pytest.fixture(name="golden", scope="module")
def fixture_golden():
  with np.load(GOLDEN) as data:
    return dict(data)


@pytest.fixture(name="image")
def fixture_image(golden):
  return golden["image"]  # a 64 x 64 crop of scikit-learn's china.jpg


@pytest.mark.parametrize("name", randaugment.OPS)
def test_ops_equal_the_reference(golden, name):
  """Every op at M = 0, 5, 10, 15, 20, sign positive, pixel for pixel (Cutout: the
  reference was given the centre that seed=M draws here)."""
  magnitudes = sorted(int(key.rsplit("_", 1)[1]) for key in golden if key.startswith(name + "_"))
  assert magnitudes == [0, 5, 10, 15, 20]
  for m in magnitudes:
    got = randaugment.apply_op(golden["image"], name, m, seed=m)
    assert got.dtype == np.uint8 and got.shape == golden["image"].shape
    np.testing.assert_array_equal(got, golden[f"{name}_{m}"], err_msg=f"{name} at M={m}")


def test_solarize_threshold_wraps_as_a_uint8(image):
  """int(M/10 x 256) is 256, 384, 512 at M = 10, 15, 20: compared as a uint8, 0, 128, 0."""
  inverted = 255 - image
  np.testing.assert_array_equal(randaugment.apply_op(image, "Solarize", 10), inverted)
  np.testing.assert_array_equal(randaugment.apply_op(image, "Solarize", 20), inverted)
  np.testing.assert_array_equal(randaugment.apply_op(image, "Solarize", 15),
                                np.where(image < 128, image, inverted))


def test_posterize_shift_clamps_like_tensorflow(image):
  np.testing.assert_array_equal(randaugment.apply_op(image, "Posterize", 20), image)  # 8 bits
  one_bit = image & 0x80
  np.testing.assert_array_equal(randaugment.apply_op(image, "Posterize", 0), one_bit)  # 0 bits
  np.testing.assert_array_equal(randaugment.apply_op(image, "Posterize", 25), one_bit)  # 10 bits


@pytest.mark.parametrize("name", ["Color", "Contrast", "Brightness", "Sharpness"])
def test_enhance_ops_are_the_identity_at_magnitude_5(image, name):
  np.testing.assert_array_equal(randaugment.apply_op(image, name, 5), image)
  assert not np.array_equal(randaugment.apply_op(image, name, 15), image)


def test_geometric_ops_fill_grey_and_keep_pixels(image):
  shifted = randaugment.apply_op(image, "TranslateX", 1)  # 10 px to the left
  np.testing.assert_array_equal(shifted[:, :-10], image[:, 10:])
  assert (shifted[:, -10:] == randaugment.FILL).all()


def test_cutout_square_follows_the_seed(image):
  row, column = randaugment.cutout_centre(image.shape, 7)
  out = randaugment.apply_op(image, "Cutout", 2.5, seed=7)  # pad int(0.25 x 40) = 10
  square = np.zeros(image.shape[:2], bool)
  square[max(0, row - 10):row + 10, max(0, column - 10):column + 10] = True
  assert (out[square] == randaugment.FILL).all()
  np.testing.assert_array_equal(out[~square], image[~square])


def test_bad_inputs_are_one_line_errors(image):
  with pytest.raises(ValueError, match=r"unknown RandAugment op 'Blur'; choose one of "
                                       r"AutoContrast, .*, SolarizeAdd$"):
    randaugment.apply_op(image, "Blur", 10)
  with pytest.raises(ValueError, match=r"uint8 RGB pixels \[H, W, 3\], not float32"):
    randaugment.randaugment(image.astype(np.float32), 2, 10, 0)


def test_randaugment_is_seeded(image):
  seed = np.array([12, 4_000_000_000], np.uint32)
  first = randaugment.randaugment(image, 2, 15, seed)
  np.testing.assert_array_equal(randaugment.randaugment(image, 2, 15, seed.copy()), first)
  np.testing.assert_array_equal(  # the pipeline's int64 words of the same seed
      randaugment.randaugment(image, 2, 15, seed.astype(np.int64)), first)
  outputs = {randaugment.randaugment(image, 2, 15, s).tobytes() for s in range(24)}
  assert len(outputs) > 12  # not 24: some pairs commute, repeated Solarize(15) is one
  np.testing.assert_array_equal(randaugment.randaugment(image, 0, 15, 3), image)


def test_each_layer_applies_one_op_with_a_random_sign(image):
  """One layer: the output is one of the 16 ops at +M or -M; over 96 seeds every op and
  both signs of Rotate show up."""
  seen = set()
  for seed in range(96):
    out = randaugment.randaugment(image, 1, 10, seed)
    matches = {(name, negate) for name in randaugment.OPS if name != "Cutout"
               for negate in (False, True)
               if np.array_equal(out, randaugment._apply(image, name, 10.0, negate, (0, 0)))}
    if not matches:  # Cutout: grey somewhere (an 80 x 80 square, clipped)
      changed = (out != image).any(axis=2)
      assert changed.any() and (out[changed] == randaugment.FILL).all()
      matches = {("Cutout", False)}
    seen |= matches
  assert {name for name, _ in seen} == set(randaugment.OPS)
  assert {("Rotate", False), ("Rotate", True)} <= seen


def test_imports_without_tensorflow():
  """The TensorFlow-free loader imports this module where TensorFlow cannot be imported."""
  code = ("import sys; sys.modules['tensorflow'] = None; import numpy as np; "
          "from vit_jax.data import randaugment; "
          "print(randaugment.randaugment(np.zeros((8, 8, 3), np.uint8), 2, 9, 1).shape)")
  result = subprocess.run([sys.executable, "-c", code], env=subprocess_env(),
                          capture_output=True, text=True, check=False)
  assert result.returncode == 0, result.stderr
  assert result.stdout.strip() == "(8, 8, 3)"


def test_every_op_takes_tiny_images():
  """Crops smaller than Sharpness's 3 x 3 filter or than a Cutout square still work."""
  for shape in ((2, 2, 3), (1, 5, 3)):
    image = np.full(shape, 7, np.uint8)
    for name in randaugment.OPS:
      assert randaugment.apply_op(image, name, 20, seed=1).shape == shape


def reference_smooth(image: np.ndarray) -> np.ndarray:
  """The reference's SMOOTH sum over the whole interior, the slow way: float32 fused
  multiply-adds in row order (each exact in float64, rounded once), truncated."""
  height, width = image.shape[:2]
  side, centre = np.float32(1.0) / np.float32(13.0), np.float32(5.0) / np.float32(13.0)
  smooth = np.zeros((height - 2, width - 2, 3), np.float32)
  for dy in range(3):
    for dx in range(3):
      weight = np.float64(centre if (dy, dx) == (1, 1) else side)
      smooth[...] = image[dy:dy + height - 2, dx:dx + width - 2] * weight + smooth
  return np.clip(smooth, 0.0, 255.0).astype(np.uint8)


def test_sharpness_fast_sum_equals_the_sum_in_order(golden):
  """Sharpness sums most values as integers and only those that 13 divides in the
  reference's order (flat 3x3 areas from a table): every value as the slow sum has it,
  on noise, on flat images of every level, and on a photo."""
  rng = np.random.default_rng(1)
  levels = np.arange(256, dtype=np.uint8).reshape(16, 16)  # 4 x 4 blocks of each level
  flat = np.repeat(np.repeat(np.repeat(levels[..., None], 3, 2), 4, 0), 4, 1)
  blocks = np.repeat(np.repeat(rng.integers(0, 256, (8, 8, 3), np.uint8), 4, 0), 4, 1)
  for image in (rng.integers(0, 256, (40, 57, 3), np.uint8), flat, blocks, golden["image"]):
    image = np.ascontiguousarray(image)
    np.testing.assert_array_equal(randaugment._smooth(image), reference_smooth(image))
