"""A decoded PIL image -> the uint8 RGB pixels tf.io.decode_image(channels=3) gives for
the same file, for every PNG and JPEG mode (the Grain loader and `predict` decode with
PIL, the tf loader with TensorFlow; a picture must not change with the loader).

PIL's own convert("RGB") differs in two places: 16-bit greyscale (mode I;16 or I) is
clipped to 255, so a 16-bit PNG reads as white where TensorFlow keeps its top byte, and
CMYK JPEGs are rounded where TensorFlow truncates. Greyscale is replicated and alpha
dropped (not composited), as TensorFlow does.
"""

import numpy as np
from PIL import Image

_SIXTEEN_BIT_GREY = ("I", "I;16", "I;16B", "I;16L", "I;16N")


def _grey_to_rgb(grey: np.ndarray) -> np.ndarray:
  return np.repeat(grey[..., None], 3, axis=-1)


def _cmyk_to_rgb(cmyk: np.ndarray) -> np.ndarray:
  """TensorFlow's conversion (jpeg_mem.cc): channel * (255 - k) / 255, truncated, on
  the inverted CMYK values PIL gives."""
  inverse = 255 - cmyk.astype(np.uint32)
  return (inverse[..., :3] * inverse[..., 3:] // 255).astype(np.uint8)


def rgb_pixels(image: Image.Image) -> np.ndarray:
  """uint8 [H, W, 3] of a loaded PIL image, as TensorFlow decodes the file."""
  mode = image.mode
  if mode in _SIXTEEN_BIT_GREY:  # 16 bits kept: the top byte, as tf's uint16 -> uint8
    grey = np.asarray(image).astype(np.int64) >> 8
    return _grey_to_rgb(np.clip(grey, 0, 255).astype(np.uint8))
  if mode == "CMYK":
    return _cmyk_to_rgb(np.asarray(image))
  if mode == "P" and "transparency" in image.info:  # (PIL warns converting it to RGB)
    image = image.convert("RGBA")
  return np.asarray(image.convert("RGB"), np.uint8)
