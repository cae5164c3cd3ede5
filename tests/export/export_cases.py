"""Checkpoints and checks the export tests share: the released-format fixtures (ViT-Ti/16 at
224, the R+ViT-Ti/16 hybrid) and small random big_vision variants (gap; MAP head with sincos2d),
written once per test process."""

import functools
import json
import os
import pathlib

import jax
import numpy as np
import pytest

from conftest import RELEASED_FIXTURES, random_params, tiny_model
from vit_jax.checkpoints import npz

# name -> (checkpoint file, image side to export at; None: the checkpoint's own)
CASES = ("vit-ti16", "r-vit-ti16", "gap", "map-sincos2d")


@pytest.fixture(scope="session")
def checkpoints(tmp_path_factory):
  """{case: (path, image_size)} for CASES. Each test module that imports this fixture
  holds its own instance of it; they share the files written once per test process."""
  return _written_checkpoints(tmp_path_factory.getbasetemp())


@functools.lru_cache(maxsize=None)
def _written_checkpoints(basetemp):
  root = basetemp / "export_checkpoints"
  root.mkdir()
  written = {}
  for name, overrides in (("gap", dict(classifier="gap")),
                          ("map-sincos2d", dict(classifier="map", posemb="sincos2d"))):
    module = tiny_model(num_classes=3, **overrides)
    path = root / f"{name}.npz"
    npz.save_npz(random_params(module, image_size=16), str(path))  # nothing to compile
    written[name] = (str(path), 32 if "sincos2d" in name else None)
  return {"vit-ti16": (str(RELEASED_FIXTURES / "vit-ti16.npz"), None),
          "r-vit-ti16": (str(RELEASED_FIXTURES / "r-vit-ti16.npz"), None), **written}


def flax_logits(checkpoint, image_size, images):
  module, params = npz.load_npz(checkpoint, image_size=image_size)
  return np.asarray(jax.jit(lambda p, x: module.apply({"params": p}, x))(params, images))


def random_images(batch, image_size, seed=1):
  """[batch, height, width, 3] noise for image_size (height, width) (metadata.json's)."""
  return np.random.default_rng(seed).uniform(-1, 1, (batch, *image_size, 3)).astype(np.float32)


def noise_and_logits(checkpoint, image_size, batch):
  """(random_images(batch, image_size), the Flax model's logits for them), read-only and
  computed once per test process: every format's test compares with the same truth."""
  size = (image_size,) * 2 if isinstance(image_size, int) else tuple(image_size)
  return _noise_and_logits(checkpoint, size, batch)


@functools.lru_cache(maxsize=None)
def _noise_and_logits(checkpoint, image_size, batch):
  images = random_images(batch, image_size)
  logits = flax_logits(checkpoint, image_size, images)
  images.setflags(write=False)
  logits.setflags(write=False)
  return images, logits


def relative(ours, truth):
  return float(np.max(np.abs(np.asarray(ours) - truth)) / np.max(np.abs(truth)))


def read_metadata(out):
  return json.loads(pathlib.Path(out, "metadata.json").read_text())


def leftovers(directory):
  """Staging folders an export left behind (it must leave none)."""
  return [n for n in os.listdir(directory) if ".partial-" in n or ".old-" in n]


class Exports:
  """{case: OUT folder} of the CASES exported to `fmt` (the export verifies itself), each
  exported when a test first reads it: a selection of tests (-k gap, --lf, a worker given
  part of a module) exports only the cases it reads, and each export's seconds show in
  the duration of the test that first reads it."""

  def __init__(self, fmt, checkpoints, root, **options):
    self._fmt, self._checkpoints, self._root, self._options = fmt, checkpoints, root, options
    self._outs = {}

  def __getitem__(self, case):
    if case not in self._outs:
      from vit_jax import export  # pylint: disable=import-outside-toplevel
      path, size = self._checkpoints[case]
      out = str(self._root / case)
      export.export(path, out, to=self._fmt, image_size=size, log=lambda _: None,
                    **self._options)
      self._outs[case] = out
    return self._outs[case]


# NaFlex (--max_patches): a MAP-pooled tiny ViT with a learned 4 x 4 table (16 px, 4 px
# patches), read at 12 patches at most; a batch of three aspect ratios other than the
# export's own verification batch.
NAFLEX_BUDGET, NAFLEX_SHAPES = 12, ((30, 10), (9, 40), (20, 20))


@functools.lru_cache(maxsize=None)
def naflex_checkpoint(root) -> str:
  path = str(pathlib.Path(root) / "naflex_map.npz")
  module = tiny_model(num_classes=3, classifier="map")
  npz.save_npz(random_params(module, image_size=16), path)
  return path


def naflex_inputs_and_logits(checkpoint):
  """(inputs {'patches', 'mask', 'grid'} of noise images of NAFLEX_SHAPES, patchified as a
  client does, the JAX NaFlexViT's logits for them)."""
  # pylint: disable=import-outside-toplevel
  from vit_jax.data import naflex_patches
  from vit_jax.families.vit import naflex_model as naflex_vit
  rng = np.random.default_rng(5)
  rows = [naflex_patches.patchify(rng.integers(0, 256, (*shape, 3), np.uint8), 4, NAFLEX_BUDGET)
          for shape in NAFLEX_SHAPES]
  inputs = dict(zip(("patches", "mask", "grid"), map(np.stack, zip(*rows))))
  module, params = npz.load_npz(checkpoint)
  model = naflex_vit.from_vit(module, 4)
  logits = jax.jit(lambda p, x: model.apply({"params": p}, x["patches"], x["mask"], x["grid"]))(
      params, inputs)
  return inputs, np.asarray(logits)
