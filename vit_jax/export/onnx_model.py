"""ONNX through jax2onnx, straight from the Flax model (no TensorFlow in between): one
.onnx file with the weights as initializers, inputs `images` [B, side, side, 3] float32
(NHWC, as everywhere in this project), outputs `logits` and `probabilities`, batch
symbolic ("B") unless --batch=N. Verified with onnxruntime's CPU provider.

Why jax2onnx and not tf2onnx: tf2onnx 1.17 cannot read the SavedModel export (its model
is one XlaCallModule op of StableHLO, which tf2onnx does not convert), and even from
jax2tf's deprecated non-native TF graph it fails against onnx 1.23 ("Could not infer the
attribute type" in onnx.helper.make_attribute). jax2onnx converts the jaxpr itself and
works with jax 0.10.2 / flax 0.12.8; its newer releases (0.14+) cap orbax-checkpoint below
0.11.37, which this project's orbax 0.12.8 excludes, so the extra pins 0.13.0.
"""

import contextlib
import io
import logging
import os
import pathlib
from typing import Any, Dict, Tuple

import jax
import jax2onnx
import numpy as np
import onnx
import onnxruntime
from jax2onnx.plugins import plugin_system

from vit_jax.export import source as source_lib

FILE = "model.onnx"
OPSET = 21
RUNTIME = f"onnxruntime {onnxruntime.__version__} (CPUExecutionProvider)"
# onnxruntime's CPU kernels (MLAS) sum in other orders than XLA and compute its GELU, tanh
# and softmax with their own approximations: ~1e-6 measured; 1e-4 leaves room for depth.
TOLERANCE = {"float32": 1e-4}
REFUSED = {
    "with_preprocessing": "JPEG decoding is no ONNX operator: decode and resize in the "
                          "client, or use --to=saved_model --with_preprocessing",
    "dtype=bfloat16": "onnxruntime's CPU provider lacks bfloat16 kernels for this model: "
                      "export float32",
    "dtype=float16": "float16 weights are a TFLite option; export float32",
    # jax2onnx 0.13's batching rules use jax.interpreters.batching.not_mapped, which jax
    # 0.10 removed: the vmap of the per-image position-table resize cannot be traced.
    "max_patches": "jax2onnx 0.13 cannot trace NaFlex's per-image position-table resize "
                   "(a vmap) under this jax: use --to=saved_model or stablehlo"}


def write(source: source_lib.Source, options, directory: str) -> Tuple[Dict, Dict[str, Any]]:
  classes, specs = source.module.num_classes, source.input_specs(options.batch)
  batch = "B" if options.batch is None else options.batch
  logits_fn = source.logits_fn()

  def outputs(*inputs):
    named = dict(zip(specs, inputs))
    logits = logits_fn(named if source.max_patches else named["images"])
    return logits, getattr(jax.nn, source.activation)(logits)

  structs = [jax.ShapeDtypeStruct((batch, *shape[1:]), dtype) for shape, dtype in specs.values()]
  model = convert(outputs, structs, list(specs), ["logits", "probabilities"])
  onnx.save(model, os.path.join(directory, FILE))
  shape = [options.batch]
  signature = {"inputs": source_lib.describe_inputs(source, options.batch),
               "outputs": {"logits": {"shape": shape + [classes], "dtype": "float32"},
                           "probabilities": {"shape": shape + [classes], "dtype": "float32"}},
               "opset": OPSET, "converter": f"jax2onnx {_version()}"}
  return {"model": FILE}, signature


def convert(fn, inputs, input_names, output_names) -> onnx.ModelProto:
  """fn as an ONNX model of opset OPSET; inputs: shapes ('B' symbolic) or ShapeDtypeStructs."""
  with _quiet_converter():
    _import_plugins_for_flax()
    return jax2onnx.to_onnx(fn, inputs, model_name="vit_jax", opset=OPSET,
                            input_names=input_names, output_names=output_names)


def _import_plugins_for_flax() -> None:
  """jax2onnx 0.13 imports all of its ~500 plugin modules before its first conversion,
  those for equinox, dm_pix and its own examples too, some of which compile small programs
  as they are imported (~5 s on this project's 2-core VM). A vit_jax model meets only its
  jax and flax plugins, so only those are imported (the .onnx files are byte for byte the
  same: checked on the export tests' four models); a jax2onnx without these internals
  imports everything itself."""
  # pylint: disable=protected-access
  if (getattr(plugin_system, "_already_imported_plugins", True) or
      not hasattr(plugin_system, "_import_tree")):
    return
  root = pathlib.Path(plugin_system.__file__).parent
  for tree in ("jax", "flax"):
    plugin_system._import_tree(root / tree, f"jax2onnx.plugins.{tree}")
  plugin_system._already_imported_plugins = True


@contextlib.contextmanager
def _quiet_converter():
  """jax2onnx 0.13 prints DEBUG lines, logs tracebacks of plugins for libraries we do not
  use (dm_pix) and onnx_ir warns about untyped constants: none of it concerns the user."""
  loggers = [logging.getLogger(name) for name in ("jax2onnx", "onnx_ir")]
  levels = [logger.level for logger in loggers]
  for logger in loggers:
    logger.setLevel(logging.ERROR)
  try:
    with contextlib.redirect_stdout(io.StringIO()):
      yield
  finally:
    for logger, level in zip(loggers, levels):
      logger.setLevel(level)


def _version() -> str:
  from importlib import metadata
  return metadata.version("jax2onnx")


def session(directory: str) -> onnxruntime.InferenceSession:
  options = onnxruntime.SessionOptions()
  options.log_severity_level = 3  # errors only: not its notes on jax2onnx's unused constants
  return onnxruntime.InferenceSession(os.path.join(directory, FILE), options,
                                      providers=["CPUExecutionProvider"])


def write_function(fn, struct: jax.ShapeDtypeStruct, input_name: str, output_name: str,
                   directory: str) -> str:
  """A function of one input (weights closed over: a family's ExportedFunction) as FILE in
  directory, its input and output named."""
  onnx.save(convert(fn, [struct], [input_name], [output_name]), os.path.join(directory, FILE))
  return FILE


def run_function(directory: str, input_name: str, output_name: str, inputs) -> np.ndarray:
  """What write_function's file computes for a batch of its input."""
  return session(directory).run([output_name], {input_name: inputs})[0]


def run(directory: str, inputs) -> np.ndarray:
  """The logits of images, or of a dict of NaFlex inputs."""
  named = inputs if isinstance(inputs, dict) else {"images": inputs}
  return session(directory).run(["logits"], named)[0]
