"""A checkpoint exported as the named functions its family declares (the family contract's
ExportSignature), for models that are no single classifier: each function written in its own
folder OUT/<name>/ by the format module (write_function), reloaded in that format's runtime
and compared with the Flax function on a fixed batch before OUT appears; the family's files
copied beside them (a tokenizer) and one metadata.json saying how to use them together."""

import dataclasses
import os
import shutil
import time
from typing import Callable, Dict, Optional

import jax
import numpy as np

from vit_jax.base import errors, no_clobber
from vit_jax.export import metadata, output
from vit_jax.export import source as source_lib
from vit_jax.models import family_contract, family_registry

VERIFY_BATCH = 2  # rows checked for a dynamic batch
REFERENCE = "the Flax model (float32, jax CPU)"


def signature_of(checkpoint: str) -> Optional[family_contract.ExportSignature]:
  """The export signature of the family that claims `checkpoint`, or None: a classifier,
  exported as one (vit_jax.export.api)."""
  family = family_registry.claiming(checkpoint)
  return None if family is None else family.export_signature


@dataclasses.dataclass(frozen=True)
class FunctionsResult:
  out: str
  format: str
  differences: Dict[str, float]  # function name -> max relative difference of its output
  compared: str  # what the differences are of: 'embedding'
  tolerance: float
  seconds: float

  def summary(self) -> str:
    folders = ", ".join(f"{name}/" for name in self.differences)
    measured = ", ".join(f"{name} {d:.2e}" for name, d in self.differences.items())
    return (f"wrote {self.out} ({self.format}: {folders}); verified in its runtime: max "
            f"relative {self.compared} difference {measured} (tolerance "
            f"{self.tolerance:.0e}) in {self.seconds:.0f}s")


def check_options(signature: family_contract.ExportSignature, to: str, **options) -> None:
  """The family's refusal of an option (one line), as an ExportError, before the load."""
  try:
    signature.check_options(to, **options)
  except errors.InvalidInput as e:
    raise source_lib.ExportError(str(e)) from None


def export(checkpoint: str, out: str, to: str, fmt,
           signature: family_contract.ExportSignature, *, image_size=None,
           batch: Optional[int] = None, overwrite: bool = False,
           log: Callable[[str], None] = print) -> FunctionsResult:
  """Exports the functions `signature` loads from `checkpoint` into `out` with format module
  fmt (the options checked by check_options); batch None: dynamic. Raises a one-line
  errors.UserError and leaves `out` as it was on failure."""
  start = time.time()
  output.check_writable(out, overwrite)
  with no_clobber.sole_writer(out, output.KIND):
    model = signature.load(checkpoint, image_size=image_size)
    for function in model.functions:
      if function.named_inputs and "max_patches" in fmt.REFUSED:  # NaFlex's inputs
        raise source_lib.ExportError(
            f"--to={to} cannot write {checkpoint}'s {function.name.replace('_', ' ')}, "
            f"which takes {', '.join(function.named_inputs.specs)}: "
            f"{fmt.REFUSED['max_patches']}")
      nbytes = sum(np.asarray(p).nbytes for p in jax.tree.leaves(function.weights))
      if nbytes > source_lib.MAX_WEIGHT_BYTES:
        raise source_lib.ExportError(
            f"{checkpoint}: the {function.name.replace('_', ' ')}'s {nbytes / 2**30:.1f} GiB "
            "of weights do not fit one serialized graph (2 GiB)")
    log(f"read {checkpoint}: {model.summary}")
    tolerance = fmt.TOLERANCE["float32"]
    differences, entries = {}, {}
    with output.staged(out) as staging:
      for function in model.functions:
        differences[function.name], entries[function.name] = _write_and_check(
            fmt, to, function, batch, model.compared, tolerance, staging)
      for name, path in model.copies.items():
        shutil.copyfile(path, os.path.join(staging, name))
      metadata.write({"format": to, "batch": batch or "dynamic", **model.describe(entries),
                      "source_checkpoint": metadata.source_checkpoint(checkpoint, model.path),
                      "exported": metadata.exported()}, staging)
    return FunctionsResult(out, to, differences, model.compared, tolerance,
                           time.time() - start)


def _write_and_check(fmt, to: str, function: family_contract.ExportedFunction,
                     batch: Optional[int], compared: str, tolerance: float, staging: str):
  """(max relative difference, metadata.json entry) of one function written into
  staging/<name>/ and run in the format's runtime; one line above the tolerance."""
  rows = batch or VERIFY_BATCH
  inputs = (function.named_inputs.draw(rows) if function.named_inputs
            else _verification_inputs(function, rows))
  reference = np.asarray(jax.jit(function.fn)(inputs))
  folder = os.path.join(staging, function.name)
  os.makedirs(folder)
  names = (function.input_name, function.output_name)
  file = fmt.write_function(function.fn, _input_struct(function, batch), *names, folder)
  difference = source_lib.relative_difference(fmt.run_function(folder, *names, inputs),
                                              reference)
  if not difference <= tolerance:
    raise source_lib.ExportError(
        f"the {to} {function.name} differs from the Flax model by {difference:.2e} "
        f"(tolerance {tolerance:.0e}): not written")
  preprocessing = ({"preprocessing": metadata.preprocessing_contract(
      function.input_shape[:2], False)} if function.input_name == "images" else {})
  return difference, {
      "files": {"model": f"{function.name}/{file}"},
      "inputs": {name: {"shape": [batch, *shape], "dtype": dtype}
                 for name, (shape, dtype) in _specs(function).items()},
      "outputs": {function.output_name: {"shape": [batch, *reference.shape[1:]],
                                         "dtype": reference.dtype.name}},
      **preprocessing, **function.metadata,
      "parity": {f"max_relative_{compared}_difference": difference, "tolerance": tolerance,
                 "runtime": fmt.RUNTIME, "batch": len(reference), "reference": REFERENCE,
                 "inputs": _inputs_note(function)}}


def _specs(function: family_contract.ExportedFunction) -> Dict[str, tuple]:
  """{input name: (item shape, dtype)}: its one input, or its named inputs."""
  if function.named_inputs:
    return dict(function.named_inputs.specs)
  return {function.input_name: (function.input_shape, function.input_dtype)}


def _input_struct(function: family_contract.ExportedFunction, batch: Optional[int]):
  """The traced input (a dict of them for named inputs): a symbolic batch 'B' (None), shared
  by all, or `batch` items."""
  size = jax.export.symbolic_shape("B") if batch is None else (batch,)
  structs = {name: jax.ShapeDtypeStruct((*size, *shape), dtype)
             for name, (shape, dtype) in _specs(function).items()}
  return structs if function.named_inputs else structs[function.input_name]


def _integers(function: family_contract.ExportedFunction) -> bool:
  return np.issubdtype(np.dtype(function.input_dtype), np.integer)


def _verification_inputs(function: family_contract.ExportedFunction,
                         rows: int) -> np.ndarray:
  """The fixed batch a function is checked on: uniform noise (integers for an integer
  input) in its input range."""
  rng = np.random.default_rng(source_lib.VERIFY_SEED)
  low, high = function.input_range
  draw = rng.integers if _integers(function) else rng.uniform
  return draw(low, high, (rows, *function.input_shape)).astype(function.input_dtype)


def _inputs_note(function: family_contract.ExportedFunction) -> str:
  if function.named_inputs:
    return function.named_inputs.note
  low, high = function.input_range
  kind = "random integers" if _integers(function) else "uniform noise"
  return f"{kind} in [{low:g}, {high:g}), seed {source_lib.VERIFY_SEED}"
