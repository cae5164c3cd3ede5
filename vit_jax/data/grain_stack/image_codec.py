"""Decoding and bilinear resizing in C for the TensorFlow-free path (np_preprocess).

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
import threading
from typing import Optional, Tuple

import cv2
import numpy as np
import simplejpeg
from PIL import Image

from vit_jax.data.grain_stack import pil_pixels

cv2.setNumThreads(1)
_JPEG_SOI = b"\xff\xd8"
_MODEL_RANGE = ((np.arange(256, dtype=np.float32) - 127.5) / 127.5).astype(np.float32)
DCT_SCALES = (8, 4, 2)  # libjpeg-turbo's power-of-two downscales (others are slower)
_SCRATCH = threading.local()  # each thread's decode buffer (decode(..., scratch=True))


def is_jpeg(encoded: bytes) -> bool:
  return encoded[:2] == _JPEG_SOI


def _decode_pil(encoded: bytes) -> np.ndarray:
  """uint8 [H, W, 3]: the pixels of tf.io.decode_image(channels=3) in every mode
  (pil_pixels: 16-bit grey, CMYK, palettes with transparency)."""
  with Image.open(io.BytesIO(encoded)) as image:
    image.load()  # a truncated file raises here (OSError), not later
    return pil_pixels.rgb_pixels(image)


# JPEG colour spaces libjpeg-turbo converts to RGB with other rounding than TensorFlow's
# (pil_pixels converts them as TensorFlow does).
_CONVERTED_AS_TF = ("CMYK", "YCCK")


def jpeg_size(encoded: bytes) -> Optional[Tuple[int, int]]:
  """(height, width) from a JPEG's header alone, or None where libjpeg-turbo cannot read
  it or should not decode it (CMYK: then decode() goes through PIL)."""
  try:
    height, width, colorspace, _ = simplejpeg.decode_jpeg_header(encoded)
  except ValueError:
    return None
  return None if colorspace in _CONVERTED_AS_TF else (height, width)


def _scratch(size: int) -> np.ndarray:
  """This thread's reusable uint8 buffer of at least `size` bytes: decoding into fresh
  memory costs a page fault per 4 KiB, as much as the decode itself when a loader keeps
  a batch of images alive."""
  buffer = getattr(_SCRATCH, "buffer", None)
  if buffer is None or buffer.size < size:
    buffer = _SCRATCH.buffer = np.empty(size, np.uint8)
  return buffer


def decode(encoded: bytes, scale: int = 1, scratch: bool = False) -> np.ndarray:
  """uint8 [H, W, 3] of encoded bytes (JPEG, PNG, GIF, BMP); a JPEG with scale s in
  DCT_SCALES decodes to ceil(H / s) x ceil(W / s). JPEGs that libjpeg-turbo refuses
  (CMYK, or corrupt: PIL then names the fault) go through PIL at full size. With
  scratch=True a JPEG may land in this thread's buffer, valid until its next decode:
  for callers that only read it to make a new array."""
  if is_jpeg(encoded):
    size = jpeg_size(encoded)
    if size is not None:
      height, width = -(-size[0] // scale), -(-size[1] // scale)
      buffer = _scratch(height * width * 3) if scratch else None
      try:
        return simplejpeg.decode_jpeg(encoded, "RGB", min_height=height, min_width=width,
                                      buffer=buffer)
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
  """[height, width, 3] bilinear resize of [H, W, 3] pixels, half-pixel centres, no
  antialiasing: tf.image.resize's sampling. float32 pixels give float32 (tf.image.resize's
  values to float rounding); uint8 pixels give uint8, rounded (OpenCV's fixed point:
  within 0.8 of a level of the float values), 4x less memory to fill."""
  height, width = size
  if pixels.shape[:2] == (height, width):
    return np.array(pixels)
  return cv2.resize(pixels, (width, height), interpolation=cv2.INTER_LINEAR)


def mirror(pixels: np.ndarray) -> np.ndarray:
  """Left-right flip, contiguous (numpy's reversed view makes later float work ~8x
  slower)."""
  return cv2.flip(np.ascontiguousarray(pixels), 1)


def model_range(pixels: np.ndarray) -> np.ndarray:
  """float32 (value - 127.5) / 127.5 of uint8 pixels of any shape (an image, a batch), by
  a lookup table: the same floats as the arithmetic."""
  pixels = np.ascontiguousarray(pixels)
  rows = pixels.reshape(pixels.shape[0], -1) if pixels.ndim > 1 else pixels[None]
  return cv2.LUT(rows, _MODEL_RANGE).reshape(pixels.shape)
