"""PIL decoding (the Grain loader's and predict's) gives tf.io.decode_image's pixels for
every PNG and JPEG mode: 16-bit pictures are not read as white, CMYK is not rounded."""

import io
import os
import struct
import zlib

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from helpers import make_config
from vit_jax.data import image_files, loaders
from vit_jax.data.grain_stack import np_preprocess, pil_pixels
from vit_jax.data.tf_stack import tf_pipeline, tf_preprocess

RNG = np.random.default_rng(0)


def _pil(array, mode):
  return Image.frombytes(mode, (array.shape[1], array.shape[0]), array.tobytes())


def _encode(image, fmt="PNG", **options):
  buffer = io.BytesIO()
  image.save(buffer, fmt, **options)
  return buffer.getvalue()


def png16(array: np.ndarray) -> bytes:
  """A 16-bit PNG of uint16 [H, W] or [H, W, C] (PIL writes 16-bit greyscale only)."""
  color_type = {1: 0, 2: 4, 3: 2, 4: 6}[1 if array.ndim == 2 else array.shape[-1]]
  rows = b"".join(b"\0" + row.astype(">u2").tobytes() for row in array)

  def chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

  header = struct.pack(">IIBBBBB", array.shape[1], array.shape[0], 16, color_type, 0, 0, 0)
  return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows))
          + chunk(b"IEND", b""))


def _bytes(*shape):
  return RNG.integers(0, 256, shape).astype(np.uint8)


def _palette():
  return _pil(_bytes(9, 11, 3), "RGB").quantize(16)


CASES = {
    "16-bit grey (I;16)": lambda: _encode(Image.fromarray(
        RNG.integers(0, 65536, (9, 11)).astype(np.uint16))),
    "16-bit grey, bright": lambda: png16(RNG.integers(40000, 65536, (9, 11))),
    "16-bit grey+alpha": lambda: png16(RNG.integers(0, 65536, (9, 11, 2))),
    "16-bit RGB": lambda: png16(RNG.integers(0, 65536, (9, 11, 3))),
    "16-bit RGBA": lambda: png16(RNG.integers(0, 65536, (9, 11, 4))),
    "1-bit": lambda: _encode(Image.fromarray(RNG.integers(0, 2, (9, 11)).astype(bool))),
    "2-bit grey": lambda: _encode(_pil((RNG.integers(0, 4, (9, 11)) * 85).astype(np.uint8),
                                       "L"), bits=2),
    "L": lambda: _encode(_pil(_bytes(9, 11), "L")),
    "LA": lambda: _encode(_pil(_bytes(9, 11, 2), "LA")),
    "RGB": lambda: _encode(_pil(_bytes(9, 11, 3), "RGB")),
    "RGBA": lambda: _encode(_pil(_bytes(9, 11, 4), "RGBA")),
    "P": lambda: _encode(_palette()),
    "P, 4-bit": lambda: _encode(_palette(), bits=4),
    "P, one transparent colour": lambda: _encode(_palette(), transparency=3),
    "P, alpha table (PA)": lambda: _encode(_palette(), transparency=bytes(range(0, 256, 16))),
    "JPEG L": lambda: _encode(_pil(_bytes(16, 16), "L"), "JPEG"),
    "JPEG RGB": lambda: _encode(_pil(_bytes(16, 16, 3), "RGB"), "JPEG", quality=90),
    "JPEG CMYK": lambda: _encode(_pil(_bytes(32, 32, 4), "CMYK"), "JPEG", quality=90),
}


@pytest.mark.parametrize("case", CASES)
def test_every_mode_decodes_to_tf_datas_pixels(case, recwarn):
  encoded = CASES[case]()
  expected = tf_preprocess.decode_image(tf.constant(encoded)).numpy()
  np.testing.assert_array_equal(np_preprocess.decode_image(encoded), expected)
  assert not [w for w in recwarn if "Palette" in str(w.message)]


def test_sixteen_bit_grey_is_its_top_byte_not_white():
  grey = RNG.integers(0, 65536, (9, 11))
  pixels = np_preprocess.decode_image(png16(grey))
  np.testing.assert_array_equal(pixels, np.repeat((grey >> 8)[..., None], 3, -1))
  as_int32 = Image.fromarray(grey.astype(np.int32))  # older Pillow opens 16-bit PNGs as I
  assert as_int32.mode == "I"
  np.testing.assert_array_equal(pil_pixels.rgb_pixels(as_int32), pixels)


def test_predict_reads_a_16_bit_picture_as_its_8_bit_copy(tmp_path):
  grey = RNG.integers(0, 65536, (20, 24))
  sixteen, eight = tmp_path / "16.png", tmp_path / "8.png"
  sixteen.write_bytes(png16(grey))
  Image.fromarray((grey >> 8).astype(np.uint8)).save(eight)
  np.testing.assert_array_equal(image_files.load_image(str(sixteen), 16),
                                image_files.load_image(str(eight), 16))


def test_a_folder_of_16_bit_pngs_gives_the_grain_loader_tf_datas_batches(tmp_path):
  for split in ("train", "test"):
    for label in ("dark", "light"):
      folder = tmp_path / split / label
      os.makedirs(folder)
      low = 0 if label == "dark" else 50000
      for i in range(2):
        (folder / f"{i}.png").write_bytes(png16(RNG.integers(low, low + 15000, (20, 20))))
  tf_config = make_config(str(tmp_path), crop=16, resize=None)
  grain_config = make_config(str(tmp_path), crop=16, resize=None)
  grain_config.loader = "grain"
  options = dict(batch_size=4, process_index=0, process_count=1)
  expected = next(tf_pipeline.open_dataset(tf_config).eval_batches(**options))
  got = next(loaders.open_dataset(grain_config).eval_batches(**options))
  assert got["image"].min() < -0.5  # the dark class is dark, not clipped to white
  assert np.abs(got["image"] - expected["image"]).max() * 127.5 <= 1.0
