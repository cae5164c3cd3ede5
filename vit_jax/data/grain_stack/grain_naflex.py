"""The Grain stack's NaFlex transforms (config.pp.max_patches, no TensorFlow), as
tf_stack/tf_naflex.py is the tf.data stack's: train and eval examples and batch scaling
on the NaFlex reading it shares with predict and exported models' clients
(vit_jax.data.naflex_patches: PIL's bilinear resize of uint8 pixels, cut into padded
patches). Train crops are the tf.data loader's: the preset's window at its own size
(crop_window's for inception), resized at its aspect ratio, flipped and RandAugmented as
pp says. Train patches stay uint8 until the loader scales the whole batch (scaled): 4x
less for worker processes to hand over."""

from typing import Dict

import numpy as np

from vit_jax.data import naflex_patches, presets
from vit_jax.data.grain_stack import crop_window, np_preprocess


def _as_pixels(image) -> np.ndarray:
  if isinstance(image, (bytes, np.bytes_)):
    return np_preprocess.decode_image(image)
  return np.asarray(image)


def _patch_dict(patches, mask, grid) -> Dict[str, np.ndarray]:
  return {"patches": patches, "mask": mask, "grid": grid}


def eval_patches(image, patch: int, max_patches: int) -> Dict[str, np.ndarray]:
  """Evaluation: the whole image (pixels or encoded bytes) as float32 patches in [-1, 1]
  (naflex_patches.patchify)."""
  return _patch_dict(*naflex_patches.patchify(_as_pixels(image), patch, max_patches))


def _train_window(pixels: np.ndarray, rng: np.random.Generator, pp) -> np.ndarray:
  """The preset's random window of uint8 pixels, at its own size."""
  height, width = pixels.shape[:2]
  if pp.preset == "inception":
    top, left, crop_h, crop_w = crop_window.inception_window(height, width, rng)
  else:
    fraction = presets.bit_side_fraction(pp.crop, pp.resize)
    crop_h, crop_w = (max(1, int(np.floor(side * fraction + 0.5))) for side in (height, width))
    top, left = (int(rng.integers(0, side - crop + 1))
                 for side, crop in ((height, crop_h), (width, crop_w)))
  return pixels[top:top + crop_h, left:left + crop_w]


def train_patches(image, rng: np.random.Generator, pp, patch: int) -> Dict[str, np.ndarray]:
  """Training: the preset's window, resized at its aspect ratio, flipped and RandAugmented
  (np_preprocess.finish_train), cut into uint8 patches (zeros past the image's)."""
  window = _train_window(_as_pixels(image), rng, pp)
  resized = naflex_patches.resize(np.ascontiguousarray(window), patch, pp.max_patches)
  pixels = np_preprocess.finish_train(resized, rng, pp.flip, pp.get("randaug"))
  return _patch_dict(*naflex_patches.cut(pixels, patch, pp.max_patches))


def scaled(batch: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
  """A batch of uint8 train patches in [-1, 1] (as naflex_patches.model_range), padding
  zero."""
  real = batch["mask"][..., None].astype(bool)
  return {**batch, "patches": np.where(real, naflex_patches.model_range(batch["patches"]),
                                       np.float32(0))}
