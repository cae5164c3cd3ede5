"""The Flax reference every export is checked against: the model's own logits, compiled
once per architecture and batch shape in a process, however often a checkpoint is loaded."""

import numpy as np

from export_cases import checkpoints, relative  # noqa: F401 (checkpoints: a fixture)
from vit_jax.export import source


def compiled():
  return source._jitted_apply._cache_size()  # pylint: disable=protected-access


def test_the_reference_compiles_once_per_architecture_and_batch(checkpoints):
  path, _ = checkpoints["gap"]
  first, again = (source.load_source(path, None, "float32") for _ in range(2))
  images = source.verification_images(5, first.image_size)  # a batch no other test uses
  before = compiled()
  truth = first.flax_logits(images)
  np.testing.assert_array_equal(again.flax_logits(images), truth)
  assert compiled() == before + 1
  eager = first.module.apply({"params": first.params}, images, train=False)
  assert truth.shape == (5, 3) and relative(truth, np.asarray(eager)) <= 1e-6
