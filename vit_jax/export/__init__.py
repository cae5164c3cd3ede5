"""Serving formats: python -m vit_jax.export CHECKPOINT OUT --to=stablehlo|saved_model|
tflite|onnx, or vit_jax.export.export(checkpoint, out, to=...). See vit_jax.export.api."""

from vit_jax.export.api import FORMATS, ExportError, Result, export

__all__ = ["FORMATS", "ExportError", "Result", "export"]
