"""metadata.json beside every export: what the model is, what it expects and returns,
where it came from and how closely it matched the Flax model when it was exported."""

import datetime
import json
import os
from typing import Any, Dict

import jax

from vit_jax.base import storage
from vit_jax.export import source as source_lib

FILE = "metadata.json"


def preprocessing_contract(image_size, in_graph: bool) -> Dict[str, Any]:
  """The evaluation preprocessing of vit_jax.data.tf_stack.tf_preprocess.eval_resize, as a
  contract."""
  height, width = image_size
  steps = ["decode to RGB uint8 (grayscale replicated, alpha dropped)",
           f"bilinear resize to {height}x{width} (height x width; no crop, no antialiasing, "
           "aspect ratio not kept)",
           "scale: (pixel - 127.5) / 127.5, i.e. [0, 255] -> [-1, 1]"]
  return {"in_graph": in_graph, "steps": steps,
          "same_as": "vit_jax.data.tf_stack.tf_preprocess.eval_resize (python -m vit_jax.predict)"}


def naflex_contract(patch: int, max_patches: int) -> Dict[str, Any]:
  """NaFlex's preprocessing (vit_jax.data.naflex_patches.patchify), as a contract: done by
  the client, never in the graph."""
  steps = ["decode to RGB uint8 (grayscale replicated, alpha dropped)",
           f"resize at the image's own aspect ratio to the largest size whose grid of {patch} "
           f"px patches holds at most {max_patches} (sides rounded up to whole patches, at "
           "least one): PIL's bilinear resize of the uint8 image",
           "scale: pixel / 255 * 2 - 1, i.e. [0, 255] -> [-1, 1]",
           f"cut into patches flattened (row, column, channel) in row-major order, padded "
           f"with zeros to {max_patches}; mask 1 on the real patches; grid (rows, columns)"]
  return {"in_graph": False, "steps": steps,
          "same_as": "vit_jax.data.naflex_patches.patchify (python -m vit_jax.predict "
                     "--max_patches; transformers' NaFlex image processor)"}


def describe(source: source_lib.Source, *, fmt: str, files: Dict[str, str],
             signature: Dict[str, Any], batch, parity: Dict[str, Any],
             in_graph_preprocessing: bool) -> Dict[str, Any]:
  classes = source_lib.class_names(source)
  return {
      "format": fmt,
      "files": files,
      "model": source.model_name,
      "architecture": source.architecture.as_kwargs(),
      "image_size": list(source.image_size),  # [height, width] traced at
      "checkpoint_image_size": list(source.checkpoint_image_size),
      "batch": batch,
      "compute_dtype": source.dtype,
      "num_classes": source.module.num_classes,
      "classes": classes["names"],
      "classes_from": classes["from"],
      "multi_label": source.multi_label,
      "probabilities": source.activation,  # of the logits: sigmoid for multi-label heads
      "signature": signature,
      "max_patches": source.max_patches,  # NaFlex's patch budget; None: images
      "preprocessing": (naflex_contract(source.module.patch_size, source.max_patches)
                        if source.max_patches else
                        preprocessing_contract(source.image_size, in_graph_preprocessing)),
      "source_checkpoint": source_checkpoint(source.checkpoint, source.path),
      "parity": parity,
      "exported": exported(),
  }


def source_checkpoint(checkpoint: str, path: str) -> Dict[str, str]:
  """Where an export came from: the checkpoint as the user gave it, the sha256 of what was
  read."""
  return {"path": checkpoint, "sha256": source_lib.sha256(path)}


def exported() -> Dict[str, str]:
  """When, and with which jax, an export was written."""
  return {"utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
          "jax": jax.__version__}


def write(metadata: Dict[str, Any], directory: str) -> None:
  storage.write_atomic(os.path.join(directory, FILE),
                       json.dumps(metadata, indent=2, ensure_ascii=False) + "\n")
