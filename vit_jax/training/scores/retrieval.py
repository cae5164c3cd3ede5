"""Zero-shot accuracy and image <-> text retrieval recall@k of embeddings, whatever model
made them (python -m vit_jax.zeroshot; evaluators of image-text runs).

Retrieval ranks by cosine similarity: an image's query succeeds at k when any of its
captions is among the k nearest texts; a caption's when its image is among the k nearest
images.
"""

from typing import Dict, Sequence

import numpy as np


def top1(scores: np.ndarray, labels: Sequence[int]) -> float:
  """Fraction of rows whose highest score is their label."""
  return float(np.mean(np.argmax(scores, axis=1) == np.asarray(labels)))


def recall_at_k(zimg: np.ndarray, ztxt: np.ndarray, image_of_text: Sequence[int],
                ks: Sequence[int] = (1, 5, 10)) -> Dict[str, float]:
  """{'image_to_text/recall@k', 'text_to_image/recall@k'} for normalised embeddings;
  image_of_text[j]: the image caption j describes."""
  image_of_text = np.asarray(image_of_text)
  similarity = np.asarray(zimg) @ np.asarray(ztxt).T  # [images, texts]
  text_rank = np.argsort(-similarity, axis=1, kind="stable")  # texts per image
  image_rank = np.argsort(-similarity.T, axis=1, kind="stable")  # images per text
  out = {}
  for k in ks:
    hits_i2t = [np.any(image_of_text[text_rank[i, :k]] == i) for i in range(len(zimg))]
    hits_t2i = [image_of_text[j] in image_rank[j, :k] for j in range(len(ztxt))]
    out[f"image_to_text/recall@{k}"] = float(np.mean(hits_i2t))
    out[f"text_to_image/recall@{k}"] = float(np.mean(hits_t2i))
  return out
