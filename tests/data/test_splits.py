"""What a source hands the pipeline: captions by example, in memory or made per class."""

import numpy as np

from vit_jax.data import splits


def test_captions_by_example_and_their_digest():
  captions = splits.Captions.grouped([["a cat", "a small cat"], ["a dog"], ["a bird"]])
  assert len(captions) == 3 and captions.of(0) == ["a cat", "a small cat"]
  assert captions.of(1) == ["a dog"] and captions.of(2) == ["a bird"]
  assert captions.digest() == splits.Captions.grouped(
      [["a cat", "a small cat"], ["a dog"], ["a bird"]]).digest()
  moved = splits.Captions.grouped([["a cat"], ["a small cat", "a dog"], ["a bird"]])
  assert moved.digest() != captions.digest()  # same texts, another example's


def test_class_captions_are_their_class_s():
  labels = np.array([1, 0, 1], np.int32)
  captions = splits.ClassCaptions(labels, (("a 0",), ("a 1", "one")))
  assert len(captions) == 3 and captions.of(0) == ["a 1", "one"] and captions.of(1) == ["a 0"]
  assert captions.digest() != splits.ClassCaptions(labels, (("a 0",), ("a 1",))).digest()
