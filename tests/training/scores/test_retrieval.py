"""Zero-shot and retrieval metrics on hand-made embeddings."""

import numpy as np

from vit_jax.training.scores import retrieval


def test_recall_at_k_both_directions():
  zimg = np.eye(3, dtype=np.float32)
  # captions 0, 1 describe image 0; caption 2 image 1; caption 3 image 2 but looks like 1.
  ztxt = np.array([[1, 0, 0], [0.6, 0.8, 0], [0, 1, 0], [0, 0.9, 0.1]], np.float32)
  ztxt /= np.linalg.norm(ztxt, axis=1, keepdims=True)
  recall = retrieval.recall_at_k(zimg, ztxt, [0, 0, 1, 2], ks=(1, 2, 3))
  # image -> text at 1: image 0 finds caption 0, image 1 caption 2, image 2 caption 3 (its
  # only caption, 0.11 vs 0) -> all three.
  assert recall["image_to_text/recall@1"] == 1.0
  # text -> image at 1: captions 0, 2 right; caption 1 -> image 1 (0.8 > 0.6), 3 -> image 1.
  assert recall["text_to_image/recall@1"] == 0.5
  assert recall["text_to_image/recall@2"] == 1.0


def test_top1():
  scores = np.array([[0.1, 0.9], [0.8, 0.2], [0.3, 0.7]])
  assert retrieval.top1(scores, [1, 0, 0]) == 2 / 3
