"""RandAugment as AugReg trained with it: big_vision's `randaug(N, M)`, in numpy and OpenCV.

The 16 ops and the level-to-argument map of `distort_image_with_randaugment`
(big_vision/pp/archive/autoaugment.py, itself the EfficientNet autoaugment of
tensorflow/tpu), written once, without TensorFlow, so that both the tf.data pipeline
(through tf.numpy_function) and a TensorFlow-free loader call the same code. Each op
reproduces the reference's uint8 and float32 arithmetic, so its output equals the
reference's pixel for pixel (benchmarks/randaugment_reference.py, docs/randaugment.md),
Sharpness included: its 3x3 filter is summed as TensorFlow's CPU kernel does it (float32
fused multiply-adds in row order; another order moves ~0.7% of the values by up to 3).
For speed (~0.45 ms for randaug(2, 15) at 224 px, half the plain numpy ops' cost) the
tables go through cv2.LUT, the geometric ops' index maps are cached and applied by
cv2.remap, and Sharpness sums in that order only the values where it matters.

What the reference does that is easy to miss (TensorFlow 2.21, measured):
  * magnitudes above 10 extrapolate (M / 10 x the range);
  * Solarize's threshold int(M/10 x 256) is compared with a uint8 tensor, so it wraps
    modulo 256: M=10 (256) and M=20 (512) invert every pixel, M=15 (384) is threshold 128,
    and M=0 (threshold 0) also inverts every pixel;
  * Posterize keeps int(M/10 x 4) bits by shifting right then left by 8 - bits; TensorFlow
    clamps a shift outside [0, 7] to 7, so 0 bits (M < 2.5) and more than 8 bits (M >= 22.5)
    both keep 1 bit, and M = 20 (8 bits) is the identity;
  * the enhance factor M/10 x 1.8 + 0.1 is exactly 1.0 at M = 5: Color, Contrast,
    Brightness and Sharpness are then the identity;
  * Contrast blends with the mean grey level (big_vision; the TF Model Garden's maintained
    copy now calls tf.image.adjust_contrast instead);
  * geometric ops sample the nearest pixel (coordinates rounded half away from zero) and
    fill what falls outside with grey 128; Rotate, Shear and Translate negate their
    argument with probability 1/2 (apply_op: never).
"""

import functools
import math
from typing import Optional, Tuple

import cv2
import numpy as np

from vit_jax.base import errors

# big_vision's op order (the uniform draw of a layer indexes it).
OPS = ("AutoContrast", "Equalize", "Invert", "Rotate", "Posterize", "Solarize", "Color",
       "Contrast", "Brightness", "Sharpness", "ShearX", "ShearY", "TranslateX", "TranslateY",
       "Cutout", "SolarizeAdd")
POINTWISE = ("Invert", "Posterize", "Solarize", "SolarizeAdd", "Brightness")  # lookup tables
GEOMETRIC = ("Rotate", "ShearX", "ShearY", "TranslateX", "TranslateY")  # signed; index maps
MAX_LEVEL = 10.0
FILL = 128
CUTOUT_CONST = 40
TRANSLATE_CONST = 100
_VALUES = np.arange(256)
_F32 = np.float32


def _check_image(image: np.ndarray) -> np.ndarray:
  image = np.asarray(image)
  if image.dtype != np.uint8 or image.ndim != 3 or image.shape[2] != 3:
    raise errors.InvalidInput(
        f"RandAugment takes uint8 RGB pixels [H, W, 3], not {image.dtype} {image.shape}; "
        "apply it before converting the image to floats")
  return image


def _lut(image: np.ndarray, table: np.ndarray) -> np.ndarray:
  """table[image] in C: table [256] for every channel, or [256, 3] one per channel."""
  table = np.asarray(table)
  table = table.reshape(256, 1, -1) if table.ndim == 2 else table
  return cv2.LUT(np.ascontiguousarray(image), table.astype(np.uint8, copy=False))


def _blend(degenerate, image, factor: float):
  """The reference's blend: float32 degenerate + factor x (image - degenerate), truncated
  to uint8 (clipped first unless 0 < factor < 1); factors 0 and 1 return an input."""
  if factor == 0.0:
    return degenerate
  if factor == 1.0:
    return image
  low = np.asarray(degenerate).astype(_F32)
  temp = low + _F32(factor) * (np.asarray(image).astype(_F32) - low)
  if not 0.0 < factor < 1.0:
    temp = np.clip(temp, 0.0, 255.0)
  return temp.astype(np.uint8)


@functools.lru_cache(maxsize=1)
def _grey_terms() -> np.ndarray:
  """float32 [256, 1, 3]: each channel's (value x (1 / 255)) x weight, rounded as the
  reference rounds it (a channel's term depends on its own value alone)."""
  unit = _VALUES.astype(_F32) * _F32(1.0 / 255.0)
  weights = np.array([0.2989, 0.5870, 0.1140], _F32)
  terms = (unit[:, None] * weights[None, :]).astype(_F32).reshape(256, 1, 3)
  terms.flags.writeable = False
  return terms


def _grey(image: np.ndarray) -> np.ndarray:
  """tf.image.rgb_to_grayscale of uint8 pixels: via [0, 1] floats, back x 255.5, truncated
  (the per-channel terms by a table, then summed left to right in float32)."""
  terms = cv2.LUT(np.ascontiguousarray(image), _grey_terms())
  weighted = (terms[..., 0] + terms[..., 1]) + terms[..., 2]
  return (weighted * _F32(255.5)).astype(np.uint8)


# --- colour ops -----------------------------------------------------------------------

def _channels(image):
  return cv2.split(np.ascontiguousarray(image))


def _autocontrast(image):
  """Each channel stretched to [0, 255] (float32 scale and offset, truncated)."""
  tables = np.empty((256, 3), np.uint8)
  for c, channel in enumerate(_channels(image)):
    low, high, _, _ = cv2.minMaxLoc(channel)
    lo, hi = _F32(low), _F32(high)
    if hi > lo:
      scale = _F32(255.0) / (hi - lo)
      tables[:, c] = np.clip(_VALUES.astype(_F32) * scale + (-lo * scale), 0.0, 255.0)
    else:
      tables[:, c] = _VALUES
  return _lut(image, tables)


def _equalize(image):
  """Each channel's histogram equalised (PIL's integer steps)."""
  tables = np.empty((256, 3), np.uint8)
  for c, channel in enumerate(_channels(image)):
    histogram = cv2.calcHist([channel], [0], None, [256], [0, 256]).ravel().astype(np.int64)
    nonzero = histogram[histogram != 0]
    step = (nonzero.sum() - nonzero[-1]) // 255
    if step == 0:
      tables[:, c] = _VALUES
      continue
    table = (np.cumsum(histogram) + step // 2) // step
    tables[:, c] = np.clip(np.concatenate([[0], table[:-1]]), 0, 255)
  return _lut(image, tables)


@functools.lru_cache(maxsize=128)
def pointwise_table(name: str, level: float) -> np.ndarray:
  """The uint8 table [256] of an op in POINTWISE: each value maps alone."""
  fraction = level / MAX_LEVEL
  if name == "Invert":
    table = 255 - _VALUES
  elif name == "Posterize":
    shift = 8 - int(fraction * 4)
    shift = shift if 0 <= shift <= 7 else 7  # TensorFlow's bitwise shifts clamp to 7 for uint8
    table = (_VALUES >> shift) << shift
  elif name == "Solarize":
    threshold = int(fraction * 256) % 256  # compared as a uint8 tensor in the reference
    table = np.where(_VALUES < threshold, _VALUES, 255 - _VALUES)
  elif name == "SolarizeAdd":
    table = np.where(_VALUES < 128, np.clip(_VALUES + int(fraction * 110), 0, 255), _VALUES)
  else:  # Brightness: blend with black
    table = _blend(np.zeros(256, np.uint8), _VALUES.astype(np.uint8), enhance_factor(level))
  table = table.astype(np.uint8)
  table.flags.writeable = False  # cached and shared
  return table


def _color(image, factor):
  return _blend(np.repeat(_grey(image)[..., None], 3, axis=2), image, factor)


def contrast_table(mean_level: int, factor: float) -> np.ndarray:
  """Contrast's uint8 table [256] for an image whose mean grey level truncates to
  `mean_level`: blend each value towards that grey."""
  values = _VALUES.astype(np.uint8)
  return np.asarray(_blend(np.full(256, mean_level, np.uint8), values, factor), np.uint8)


def _contrast(image, factor):
  """big_vision's Contrast: blend towards the (truncated) mean grey level."""
  grey = _grey(image)
  mean = _F32(grey.sum(dtype=np.int64)) / _F32(grey.size)  # exact sums below 2**24
  return _lut(image, contrast_table(int(np.clip(mean, 0.0, 255.0)), factor))


_SMOOTH_KERNEL = np.array([[1, 1, 1], [1, 5, 1], [1, 1, 1]], np.float32)
_NEIGHBOURS = np.ones((3, 3), np.uint8)


def _smooth_in_order(image: np.ndarray, elements: np.ndarray) -> np.ndarray:
  """The reference's smoothed float32 value at `elements` (flat indices of interior
  values of a contiguous image): TensorFlow's CPU kernel sums the 3x3 filter as float32
  fused multiply-adds in row order; in float64, weight x pixel + sum is exact and then
  rounded once."""
  flat, row = image.ravel(), image.shape[1] * image.shape[2]
  side, centre = _F32(1.0) / _F32(13.0), _F32(5.0) / _F32(13.0)
  smooth = np.zeros(len(elements), _F32)
  for dy in range(3):
    for dx in range(3):
      weight = np.float64(centre if (dy, dx) == (1, 1) else side)
      term = np.take(flat, elements + ((dy - 1) * row + (dx - 1) * 3)) * weight
      smooth[...] = term + smooth
  return smooth


@functools.lru_cache(maxsize=1)
def _uniform_smooth() -> np.ndarray:
  """uint8 [256]: the reference's truncated smooth value where all 9 pixels equal v."""
  blocks = np.repeat(_VALUES.astype(np.uint8), 3)  # 3 columns of each value
  grid = np.ascontiguousarray(np.broadcast_to(blocks[None, :, None], (3, 768, 3)))
  centres = (768 + 3 * _VALUES + 1) * 3  # row 1, each block's middle column, channel 0
  table = np.clip(_smooth_in_order(grid, centres), 0.0, 255.0).astype(np.uint8)
  table.flags.writeable = False
  return table


def _smooth(image: np.ndarray) -> np.ndarray:
  """uint8 [H - 2, W - 2, 3]: the reference's SMOOTH filter sum, truncated.

  With T the integer sum (weights 1 and 5), the float32 sum is T / 13 within a few
  ulps, so it truncates to T // 13 unless 13 divides T; those values (~1 in 13 plus flat
  areas) get the reference's own sum: a table where the 9 pixels are equal, else
  _smooth_in_order, which decides on which side of the integer they land."""
  total = cv2.filter2D(image, cv2.CV_16S, _SMOOTH_KERNEL)[1:-1, 1:-1]  # exact integers
  quotient = total // 13
  smooth = quotient.astype(np.uint8)
  exact = quotient * 13 == total
  flat = (cv2.erode(image, _NEIGHBOURS) == cv2.dilate(image, _NEIGHBOURS))[1:-1, 1:-1]
  uniform = exact & flat
  smooth[uniform] = _uniform_smooth()[image[1:-1, 1:-1][uniform]]
  inner = np.flatnonzero(exact & ~flat)  # into [H - 2, W - 2, 3]
  rows, rest = np.divmod(inner, smooth.shape[1] * 3)
  elements = (rows + 1) * (image.shape[1] * 3) + 3 + rest  # into [H, W, 3]
  exact_values = np.clip(_smooth_in_order(image, elements), 0.0, 255.0)
  smooth.reshape(-1)[inner] = exact_values.astype(np.uint8)
  return smooth


def _sharpness(image, factor):
  """Blend with PIL's SMOOTH filter (1 1 1 / 1 5 1 / 1 1 1) / 13; the border keeps its
  pixels (an image under 3 x 3 px is all border)."""
  height, width = image.shape[:2]
  if factor == 1.0 or min(height, width) < 3:
    return image
  image = np.ascontiguousarray(image)
  degenerate = image.copy()
  degenerate[1:-1, 1:-1] = _smooth(image)
  return _blend(degenerate, image, factor)


# --- geometric ops (nearest neighbour, grey fill) ----------------------------------------

def source_index(name: str, level: float, negate: bool, height: int, width: int
                 ) -> np.ndarray:
  """int64 [H, W]: the flat input pixel that each output pixel of an op in GEOMETRIC reads,
  height x width where it falls outside (FILL). Output (x, y) reads input
  (a0 x + a1 y + a2, b0 x + b1 y + b2), computed in float32 as ImageProjectiveTransformV3
  does and rounded half away from zero."""
  row_x, row_y = _affine_rows(name, level, negate, height, width)
  x = np.arange(width, dtype=_F32)[None, :]
  y = np.arange(height, dtype=_F32)[:, None]
  source_x, inside_x = _nearest(_affine(row_x, x, y), width)
  source_y, inside_y = _nearest(_affine(row_y, x, y), height)
  return np.where(inside_x & inside_y, source_y * width + source_x, height * width)


def _affine_rows(name: str, level: float, negate: bool, height: int, width: int):
  """The transform's rows (a0, a1, a2), (b0, b1, b2), in float32 as the reference builds
  them (its signed argument is a float32 tensor)."""
  fraction = level / MAX_LEVEL
  sign = _F32(-1.0 if negate else 1.0)
  if name == "Rotate":
    radians = sign * _F32(fraction * 30.0) * _F32(math.pi / 180.0)
    cos, sin = _F32(math.cos(radians)), _F32(math.sin(radians))
    h, w = _F32(height), _F32(width)
    x_offset = ((w - 1) - (cos * (w - 1) - sin * (h - 1))) / _F32(2.0)
    y_offset = ((h - 1) - (sin * (w - 1) + cos * (h - 1))) / _F32(2.0)
    return (cos, -sin, x_offset), (sin, cos, y_offset)
  if name in ("ShearX", "ShearY"):
    shear = sign * _F32(fraction * 0.3)
    if name == "ShearX":
      return (1.0, shear, 0.0), (0.0, 1.0, 0.0)
    return (1.0, 0.0, 0.0), (shear, 1.0, 0.0)
  shift = sign * _F32(fraction * float(TRANSLATE_CONST))
  if name == "TranslateX":
    return (1.0, 0.0, shift), (0.0, 1.0, 0.0)
  return (1.0, 0.0, 0.0), (0.0, 1.0, shift)


def _affine(row: Tuple, x: np.ndarray, y: np.ndarray) -> np.ndarray:
  """(c0 x + c1 y) + c2 in float32, left to right; a zero term (exact either way) is
  skipped, so translations stay one row or column."""
  c0, c1, c2 = map(_F32, row)
  total = None
  for coefficient, values in ((c0, x), (c1, y)):
    if coefficient != 0:
      term = coefficient * values
      total = term if total is None else total + term
  return total + c2


def _nearest(coordinates: np.ndarray, size: int):
  """(index, inside) of std::round (half away from zero, not numpy's half to even):
  floor(c + 0.5), exact in float64, is the same for every c that lands inside."""
  coordinates = coordinates.astype(np.float64)
  inside = (coordinates > -0.5) & (coordinates < size - 0.5)
  return np.floor(coordinates + 0.5).astype(np.int64), inside


@functools.lru_cache(maxsize=64)
def _remap(name: str, level: float, negate: bool, height: int, width: int) -> np.ndarray:
  """float32 [H, W, 2]: source_index as OpenCV's (x, y) map of whole numbers, (-1, -1)
  outside (cached: a run has one magnitude and one crop size, so 10 maps)."""
  flat = source_index(name, level, negate, height, width)
  pairs = np.stack([flat % width, flat // width], axis=-1).astype(np.float32)
  pairs[flat == height * width] = -1
  pairs.flags.writeable = False
  return pairs


def _geometric(image, name, level, negate):
  height, width = image.shape[:2]
  return cv2.remap(np.ascontiguousarray(image), _remap(name, level, negate, height, width),
                   None, cv2.INTER_NEAREST, borderMode=cv2.BORDER_CONSTANT,
                   borderValue=(FILL, FILL, FILL))


def _cutout(image, pad: int, centre: Tuple[int, int]):
  """A (2 pad)^2 square of FILL centred at `centre` (row, column), clipped to the image."""
  out = image.copy()
  row, column = centre
  out[max(0, row - pad):row + pad, max(0, column - pad):column + pad] = FILL
  return out


# --- levels, seeds and the policy -------------------------------------------------------

def enhance_factor(level: float) -> float:
  return (level / MAX_LEVEL) * 1.8 + 0.1


def cutout_pad(level: float) -> int:
  return int((level / MAX_LEVEL) * CUTOUT_CONST)


def _apply(image, name: str, level: float, negate: bool, centre: Tuple[int, int]):
  """One op at `level` with the reference's argument; `negate` flips the signed ones."""
  if name in POINTWISE:
    return _lut(image, pointwise_table(name, level))
  if name in GEOMETRIC:
    return _geometric(image, name, level, negate)
  if name == "AutoContrast":
    return _autocontrast(image)
  if name == "Equalize":
    return _equalize(image)
  if name in ("Color", "Contrast", "Sharpness"):
    enhance = {"Color": _color, "Contrast": _contrast, "Sharpness": _sharpness}[name]
    return enhance(image, enhance_factor(level))
  if name == "Cutout":
    return _cutout(image, cutout_pad(level), centre)
  raise errors.InvalidInput(f"unknown RandAugment op {name!r}; choose one of {', '.join(OPS)}")


def _rng(seed) -> np.random.Generator:
  """A generator of an int seed or of the pipeline's per-example seed (2 integers)."""
  words = np.asarray(seed).astype(np.uint64).ravel()
  return np.random.default_rng([int(word) for word in words])


def cutout_centre(shape, seed) -> Tuple[int, int]:
  """(row, column) of Cutout's square for apply_op(..., seed=seed) on an image of `shape`."""
  rng = _rng(seed)
  return int(rng.integers(shape[0])), int(rng.integers(shape[1]))


def apply_op(image: np.ndarray, name: str, magnitude: float,
             seed: Optional[object] = None) -> np.ndarray:
  """One op, its sign positive, on uint8 [H, W, 3] pixels. `seed` places Cutout's square
  (cutout_centre); without one the square is centred on the image."""
  image = _check_image(image)
  if name not in OPS:
    raise errors.InvalidInput(f"unknown RandAugment op {name!r}; choose one of {', '.join(OPS)}")
  centre = ((image.shape[0] // 2, image.shape[1] // 2) if seed is None
            else cutout_centre(image.shape, seed))
  return _apply(image, name, float(magnitude), False, centre)


def layer_draws(seed, num_layers: int, height: int, width: int) -> np.ndarray:
  """int64 [num_layers, 4]: each layer's (op index in OPS, negate 0/1, Cutout row, Cutout
  column), all from `seed` (an int, or the pipeline's per-example seed of 2 integers)."""
  rng = _rng(seed)
  draws = np.empty((num_layers, 4), np.int64)
  for layer in range(num_layers):
    draws[layer] = (rng.integers(len(OPS)), rng.random() < 0.5, rng.integers(height),
                    rng.integers(width))
  return draws


def randaugment(image: np.ndarray, num_layers: int, magnitude: float, seed) -> np.ndarray:
  """big_vision's randaug(num_layers, magnitude): each layer applies one of the 16 ops,
  drawn uniformly, with a random sign and Cutout position (layer_draws of `seed`)."""
  image = _check_image(image)
  for op, negate, row, column in layer_draws(seed, num_layers, *image.shape[:2]):
    image = _apply(image, OPS[op], float(magnitude), bool(negate), (int(row), int(column)))
  return image
