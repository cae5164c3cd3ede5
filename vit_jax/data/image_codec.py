"""Decoding and bilinear resizing in C for the TensorFlow-free path (preprocess_np).

JPEGs decode through libjpeg-turbo (simplejpeg: ~4x PIL's decode of the same file here,
pixel for pixel the same with the accurate integer IDCT that tf.data is set to), other
formats through PIL. A JPEG may decode at 1/2, 1/4 or 1/8 scale in the DCT domain when
the caller needs no more pixels than that (train crops far larger than the model's
input; TensorFlow's own decode does not do this, so such crops come out antialiased
where tf.data's alias). Resizes are OpenCV's bilinear on float32, whose half-pixel
sampling is tf.image.resize's (bilinear, antialias=False) to float rounding. OpenCV runs
on one thread: a loader parallelises over images, not within one.
"""

import io
from typing import Optional, Tuple

import cv2
import numpy as np
import simplejpeg
from PIL import Image

cv2.setNumThreads(1)
_JPEG_SOI = b"\xff\xd8"
_MODEL_RANGE = ((np.arange(256, dtype=np.float32) - 127.5) / 127.5).astype(np.float32)
DCT_SCALES = (8, 4, 2)  # libjpeg-turbo's power-of-two downscales (others are slower)


def is_jpeg(encoded: bytes) -> bool:
  return encoded[:2] == _JPEG_SOI


def _decode_pil(encoded: bytes) -> np.ndarray:
  """uint8 [H, W, 3]: grayscale replicated, alpha dropped (tf.io.decode_image(channels=3))."""
  with Image.open(io.BytesIO(encoded)) as image:
    image.load()  # a truncated file raises here (OSError), not later
    return np.asarray(image.convert("RGB"), np.uint8)


def jpeg_size(encoded: bytes) -> Optional[Tuple[int, int]]:
  """(height, width) from a JPEG's header alone, or None where libjpeg-turbo cannot read
  it (then decode() reports what is wrong)."""
  try:
    height, width, _, _ = simplejpeg.decode_jpeg_header(encoded)
  except ValueError:
    return None
  return height, width


def decode(encoded: bytes, scale: int = 1) -> np.ndarray:
  """uint8 [H, W, 3] of encoded bytes (JPEG, PNG, GIF, BMP); a JPEG with scale s in
  DCT_SCALES decodes to ceil(H / s) x ceil(W / s). JPEGs that libjpeg-turbo refuses
  (CMYK, or corrupt: PIL then names the fault) go through PIL at full size."""
  if is_jpeg(encoded):
    size = jpeg_size(encoded)
    if size is not None:
      try:
        return simplejpeg.decode_jpeg(encoded, "RGB", min_height=-(-size[0] // scale),
                                      min_width=-(-size[1] // scale))
      except ValueError:
        pass
  return _decode_pil(encoded)


def dct_scale(window: Tuple[int, int], output: Tuple[int, int]) -> int:
  """The largest of DCT_SCALES that leaves a window of (height, width) pixels at least
  `output` (height, width) pixels, else 1."""
  for scale in DCT_SCALES:
    if window[0] // scale >= output[0] and window[1] // scale >= output[1]:
      return scale
  return 1


def resize(pixels: np.ndarray, size: Tuple[int, int]) -> np.ndarray:
  """float32 [height, width, 3] bilinear resize of [H, W, 3] pixels (any dtype),
  half-pixel centres, no antialiasing: tf.image.resize's sampling."""
  height, width = size
  source = np.asarray(pixels, np.float32)
  if source.shape[:2] == (height, width):
    return np.array(source, np.float32)
  return cv2.resize(source, (width, height), interpolation=cv2.INTER_LINEAR)


def mirror(pixels: np.ndarray) -> np.ndarray:
  """Left-right flip, contiguous (numpy's reversed view makes later float work ~8x
  slower)."""
  return cv2.flip(np.ascontiguousarray(pixels), 1)


def model_range(pixels: np.ndarray) -> np.ndarray:
  """float32 (value - 127.5) / 127.5 of uint8 pixels, by a lookup table: the same floats
  as the arithmetic."""
  return cv2.LUT(np.ascontiguousarray(pixels), _MODEL_RANGE)
