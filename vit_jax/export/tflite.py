"""TFLite from the SavedModel export: the serving module is saved with a fixed batch
(TFLite's converter cannot lower a symbolic batch: `tokens[:, 0]` becomes a dynamic
gather) and converted by tf.lite.TFLiteConverter; float32, or float16 weights with
--dtype=float16 (half the file; computed in float32 after dequantization on the CPU).

Runtime: ai_edge_litert's Interpreter (LiteRT, the `export` extra). TensorFlow 2.21 still
ships tf.lite.Interpreter but warns that it is deprecated and scheduled for deletion in
favour of LiteRT; the converter stays in TensorFlow. Reload:
Interpreter(model_path=...).get_signature_runner()(images=x)["logits"].
"""

import os
import shutil
import tempfile
from typing import Any, Dict, Tuple

import numpy as np
import tensorflow as tf
from ai_edge_litert import __version__ as litert_version
from ai_edge_litert.interpreter import Interpreter

from vit_jax.base import storage
from vit_jax.export import saved_model
from vit_jax.export import source as source_lib

FILE = "model.tflite"
DEFAULT_BATCH = 1
RUNTIME = f"ai_edge_litert {litert_version} Interpreter (XNNPACK)"
# float32: TFLite's own kernels (XNNPACK) sum in other orders than XLA: ~1e-6 measured on
# ViT-Ti/16, 1e-4 leaves room for deeper models. float16 weights round every weight to 11
# significant bits (2^-11 relative): measured ~1e-3, hence 1e-2.
TOLERANCE = {"float32": 1e-4, "float16": 1e-2}
REFUSED = {
    "batch=dynamic": "TFLite's converter cannot lower the symbolic batch (the class token's "
                     "gather becomes a dynamic gather): pass --batch=N",
    "with_preprocessing": "JPEG decoding would need TFLite's Flex (TensorFlow) ops: decode "
                          "and resize in the app, or use --to=saved_model --with_preprocessing",
    "dtype=bfloat16": "TFLite has no bfloat16 kernels: use --dtype=float16 (float16 weights)",
    # The converter mis-lowers the three-operand einsum of the per-image position-table
    # resize (models/posemb.py): logits 9e-2 off on a tiny model (two einsums convert).
    "max_patches": "TFLite's converter miscomputes NaFlex's per-image position-table resize "
                   "(the export was 9e-2 off): use --to=saved_model or stablehlo"}


def convert(source: source_lib.Source, batch: int, float16_weights: bool) -> bytes:
  staging = tempfile.mkdtemp(prefix="vit_jax_tflite-")
  try:
    path = os.path.join(staging, saved_model.DIR)
    saved_model.save(saved_model.serving_module(source, batch, False, platforms=("cpu",)),
                     path)
    converter = tf.lite.TFLiteConverter.from_saved_model(path)
    if float16_weights:
      converter.optimizations = [tf.lite.Optimize.DEFAULT]
      converter.target_spec.supported_types = [tf.float16]
    return converter.convert()
  finally:
    shutil.rmtree(staging, ignore_errors=True)


def write(source: source_lib.Source, options, directory: str) -> Tuple[Dict, Dict[str, Any]]:
  storage.write_atomic(os.path.join(directory, FILE),
                       convert(source, options.batch, options.dtype == "float16"))
  classes = source.module.num_classes
  signature = {"name": saved_model.SIGNATURE,
               "inputs": source_lib.describe_inputs(source, options.batch),
               "outputs": {"logits": {"shape": [options.batch, classes], "dtype": "float32"},
                           "probabilities": {"shape": [options.batch, classes],
                                             "dtype": "float32"}},
               "weights": "float16" if options.dtype == "float16" else "float32"}
  return {"model": FILE}, signature


def run(directory: str, inputs) -> np.ndarray:
  """The logits of images, or of a dict of NaFlex inputs."""
  interpreter = Interpreter(model_path=os.path.join(directory, FILE))
  named = inputs if isinstance(inputs, dict) else {"images": inputs}
  return interpreter.get_signature_runner(saved_model.SIGNATURE)(**named)["logits"]
