"""StableHLO through jax.export: one self-contained file (weights included) that
jax.export.deserialize reloads and any runtime of the StableHLO/XLA family can compile.

Reload: exported = jax.export.deserialize(bytearray(open("model.stablehlo", "rb").read()));
logits = exported.call(images). The batch dimension is symbolic ("b") unless --batch=N.
"""

import os
from typing import Any, Dict, Tuple

import jax
import numpy as np

from vit_jax.base import storage
from vit_jax.export import source as source_lib

FILE = "model.stablehlo"
RUNTIME = f"jax {jax.__version__} (jax.export.deserialize, XLA CPU)"
TOLERANCE = {"float32": 1e-5, "bfloat16": 1e-5}  # the same XLA program as the Flax model
REFUSED = {"with_preprocessing": "JPEG decoding is no StableHLO operation: feed images "
                                 "already preprocessed (see metadata.json), or export "
                                 "--to=saved_model --with_preprocessing",
           "dtype=float16": "float16 weights are a TFLite option; use float32 or bfloat16"}


def input_structs(source: source_lib.Source, batch) -> Dict[str, jax.ShapeDtypeStruct]:
  """The model's inputs (source.input_specs), one symbolic batch 'b' shared by all."""
  (size,) = jax.export.symbolic_shape("b") if batch is None else (batch,)
  return {name: jax.ShapeDtypeStruct((size, *shape[1:]), dtype)
          for name, (shape, dtype) in source.input_specs(batch).items()}


def write(source: source_lib.Source, options, directory: str) -> Tuple[Dict, Dict[str, Any]]:
  structs = input_structs(source, options.batch)
  arguments = structs if source.max_patches else structs["images"]
  exported = _save(source.logits_fn(), arguments, directory)
  names = ", ".join(structs)
  signature = {"inputs": source_lib.describe_inputs(source, options.batch),
               "outputs": {"logits": {"shape": [options.batch, source.module.num_classes],
                                      "dtype": "float32"}},
               "call": (f"jax.export.deserialize(data).call({{{names}}}) (a dict)"
                        if source.max_patches else "jax.export.deserialize(data).call(images)"),
               "platforms": list(exported.platforms)}
  return {"model": FILE}, signature


def write_function(fn, struct: jax.ShapeDtypeStruct, input_name: str, output_name: str,
                   directory: str) -> str:
  """A function of one input (weights closed over: a family's ExportedFunction) as FILE in
  directory; a StableHLO call takes its input by position and returns its output unnamed."""
  del input_name, output_name
  _save(fn, struct, directory)
  return FILE


def _save(fn, arguments, directory: str) -> jax.export.Exported:
  """fn lowered for PLATFORMS at the arguments' shapes, written as FILE in directory."""
  exported = jax.export.export(jax.jit(fn), platforms=source_lib.PLATFORMS)(arguments)
  storage.write_atomic(os.path.join(directory, FILE), bytes(exported.serialize()))
  return exported


def run_function(directory: str, input_name: str, output_name: str, inputs) -> np.ndarray:
  """What write_function's file computes for a batch of its input."""
  del input_name, output_name
  return run(directory, inputs)


def load(directory: str) -> jax.export.Exported:
  return jax.export.deserialize(bytearray(storage.read_bytes(os.path.join(directory, FILE))))


def run(directory: str, images: np.ndarray) -> np.ndarray:
  return np.asarray(load(directory).call(images))
