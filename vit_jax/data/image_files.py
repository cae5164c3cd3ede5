"""Images named on a command line (predict, visualize, zeroshot): the arguments checked
before a slow checkpoint load, and each file decoded and resized as evaluation preprocesses
it (or patchified at its own aspect ratio, NaFlex), without TensorFlow; the folders of
class folders and captions files that zeroshot and the image-text evaluators read alike."""

import os
from typing import List, Sequence, Tuple

import numpy as np

from vit_jax.base import cli, errors, storage

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".gif", ".webp")


class ImageError(errors.InvalidInput):
  """An image that cannot be read or decoded; the message names the file."""


def _pil_message(error: Exception) -> str:
  return " ".join(str(error).split()) or type(error).__name__


def _decoded(path: str, prepare):
  """prepare(uint8 [H, W, 3]) of the image file at path; a file that cannot be read or
  decoded is one ImageError naming it."""
  try:
    encoded = storage.read_bytes(path)
  except FileNotFoundError:
    raise ImageError(f"image not found: {path}") from None
  except OSError as e:
    raise ImageError(f"cannot read image {path}: {e.strerror or e}") from None
  from vit_jax.data.grain_stack import (  # pylint: disable=import-outside-toplevel (PIL)
      np_preprocess)
  try:
    return prepare(np_preprocess.decode_image(encoded))
  except (OSError, ValueError, SyntaxError) as e:  # PIL: not an image, truncated
    raise ImageError(f"cannot read image {path}: {_pil_message(e)}") from None


def load_image(path: str, image_size) -> np.ndarray:
  """[height, width, 3] float32 in [-1, 1] for image_size (a side or (height, width)),
  preprocessed like evaluation (the same pixels as tf.data's: np_preprocess), without
  TensorFlow."""
  from vit_jax.data.grain_stack import (  # pylint: disable=import-outside-toplevel (PIL)
      np_preprocess)
  return _decoded(path, lambda image: np_preprocess.eval_resize(image, image_size))


def read_pixels(path: str) -> np.ndarray:
  """The decoded image, uint8 [H, W, 3] (what NaFlex's reading sizes a batch by before it
  patchifies: vit_jax.data.naflex_patches.sequence_length)."""
  return _decoded(path, lambda image: image)


def load_naflex(path: str, patch: int, max_patches: int):
  """(patches, mask, grid) of the image at its own aspect ratio in at most max_patches
  patches (SigLIP 2's NaFlex reading: vit_jax.data.naflex_patches)."""
  from vit_jax.data import naflex_patches  # pylint: disable=import-outside-toplevel (PIL)
  return _decoded(path, lambda image: naflex_patches.patchify(image, patch, max_patches))


def image_arguments(argv: Sequence[str]) -> List[str]:
  """The command's IMAGE arguments; a missing local file fails here, before the (slow)
  checkpoint load."""
  image_paths = list(argv[1:])
  if not image_paths:
    raise cli.UsageError("give one or more images")
  missing = [p for p in image_paths if not storage.is_url(p) and not os.path.exists(p)]
  if missing:
    raise ImageError(f"image not found: {missing[0]}")
  return image_paths


def folder_images(root: str) -> Tuple[List[str], List[int], List[str]]:
  """(image paths, labels, class names) of root/<class>/<image>, classes sorted."""
  if not os.path.isdir(root):
    raise errors.InvalidInput(f"{root} is no folder of class folders (ROOT/CLASS/IMAGE)")
  classes = sorted(d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d)))
  paths, labels = [], []
  for label, name in enumerate(classes):
    for file in sorted(os.listdir(os.path.join(root, name))):
      if file.lower().endswith(IMAGE_SUFFIXES):
        paths.append(os.path.join(root, name, file))
        labels.append(label)
  if not paths:
    raise errors.InvalidInput(f"{root} holds no images in class folders "
                              f"(ROOT/CLASS/IMAGE with {', '.join(IMAGE_SUFFIXES)})")
  return paths, labels, classes


def read_captions(path: str) -> Tuple[List[str], List[str], List[int]]:
  """(image paths, captions, image index of each caption) of 'IMAGE<TAB>CAPTION' lines;
  relative image paths are taken from the captions file's folder."""
  images, captions, owner = {}, [], []  # image path -> its index, in order of appearance
  for number, line in enumerate(storage.read_text(path).splitlines(), 1):
    if not line.strip():
      continue
    if "\t" not in line:
      raise errors.InvalidInput(f"{path}:{number} is no 'IMAGE<TAB>CAPTION' line")
    image, caption = line.split("\t", 1)
    if not caption.strip():
      raise errors.InvalidInput(f"{path}:{number} has a blank caption: give each image's "
                                "text after the tab, or drop the line")
    image = os.path.join(os.path.dirname(path), image)
    captions.append(caption.strip())
    owner.append(images.setdefault(image, len(images)))
  if not captions:
    raise errors.InvalidInput(f"{path} holds no 'IMAGE<TAB>CAPTION' lines")
  return list(images), captions, owner
