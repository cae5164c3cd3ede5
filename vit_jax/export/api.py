"""export(): checkpoint -> verified artefact + metadata.json in OUT, for every format.

Each format module (stablehlo, saved_model, tflite, onnx_model) writes its files into a
staging folder, reloads them with its own runtime, and the result is compared with the
Flax model on a fixed batch before OUT appears (see output.staged). A model whose family
declares an export signature is written as its named functions instead (export.functions).
"""

import dataclasses
import importlib
import time
from typing import Callable, Optional, Union

from vit_jax.base import no_clobber
from vit_jax.checkpoints import naflex_reading, npz
from vit_jax.export import functions, metadata, output
from vit_jax.export import source as source_lib
from vit_jax.export.source import ExportError
from vit_jax.families.vit import naflex_model as naflex_vit

FORMATS = ("stablehlo", "saved_model", "tflite", "onnx")
_MODULES = {"stablehlo": "stablehlo", "saved_model": "saved_model", "tflite": "tflite",
            "onnx": "onnx_model"}
DTYPES = ("float32", "bfloat16", "float16")
VERIFY_BATCH = 2  # rows checked for a dynamic batch


@dataclasses.dataclass(frozen=True)
class Options:
  batch: Optional[int]  # None: dynamic
  dtype: str  # float32 | bfloat16 (compute) | float16 (TFLite weights)
  with_preprocessing: bool


@dataclasses.dataclass(frozen=True)
class Result:
  out: str
  format: str
  max_relative_difference: float
  tolerance: float
  runtime: str
  seconds: float

  def summary(self) -> str:
    return (f"wrote {self.out} ({self.format}); verified in {self.runtime}: max relative "
            f"logit difference {self.max_relative_difference:.2e} (tolerance "
            f"{self.tolerance:.0e}) in {self.seconds:.0f}s")


def format_module(to: str):
  if to not in _MODULES:
    raise ExportError(f"unknown format {to!r}: --to must be one of {', '.join(FORMATS)}")
  try:
    return importlib.import_module(f"vit_jax.export.{_MODULES[to]}")
  except ModuleNotFoundError as e:  # a runtime of the optional `export` extra
    if (e.name or "").startswith("vit_jax"):
      raise
    raise ExportError(f"--to={to} needs {e.name}, which is not installed: pip install "
                      "'vit_jax[export]'") from None


def parse_batch(batch: Union[None, int, str]) -> Union[None, int, str]:
  """None (the format's default), 'dynamic' or a positive int, from a flag or an int."""
  if batch is None or batch == "dynamic":
    return batch
  try:
    value = int(batch)
  except (TypeError, ValueError):
    value = 0
  if value < 1 or str(batch).strip() != str(value):
    raise ExportError(f"batch must be a positive integer or 'dynamic', got {batch!r}")
  return value


def _options(to: str, fmt, batch, dtype: str, with_preprocessing: bool,
             max_patches: Optional[int] = None, from_file: bool = False) -> Options:
  """The options a format takes; max_patches (NaFlex) the budget asked for, or with
  from_file the one the checkpoint records (then the refusal says how to export squares)."""
  if dtype not in DTYPES:
    raise ExportError(f"unknown dtype {dtype!r}: choose one of {', '.join(DTYPES)}")
  batch = parse_batch(batch)
  if batch is None:
    batch = getattr(fmt, "DEFAULT_BATCH", "dynamic")
  asked = {"with_preprocessing": with_preprocessing, f"dtype={dtype}": dtype != "float32",
           "batch=dynamic": batch == "dynamic", "max_patches": bool(max_patches)}
  for option, on in asked.items():
    if on and option in fmt.REFUSED:
      squares = (f" (the checkpoint records NaFlex at {max_patches} patches: "
                 f"--max_patches={naflex_reading.SQUARE} exports it for square images)"
                 if option == "max_patches" and from_file else "")
      raise ExportError(f"--to={to} does not support {option}: {fmt.REFUSED[option]}"
                        + squares)
  return Options(None if batch == "dynamic" else batch, dtype, with_preprocessing)


def export(checkpoint: str, out: str, *, to: str, image_size: Optional[npz.ImageSize] = None,
           batch: Union[None, int, str] = None, dtype: str = "float32",
           with_preprocessing: bool = False, overwrite: bool = False,
           max_patches: Optional[int] = None, log: Callable[[str], None] = print):
  """Exports `checkpoint` (anything load_npz reads, or a released name) to folder `out`
  -> Result; a checkpoint whose family declares an export signature as its named functions
  (export.functions) -> functions.FunctionsResult.

  to: stablehlo | saved_model | tflite | onnx. image_size: a side or (height, width) to
  trace at (metadata.json records it); default the checkpoint's own.
  batch: 'dynamic' or N (default: dynamic; 1 for tflite). dtype: float32, bfloat16
  (compute dtype; stablehlo and saved_model) or float16 (tflite: float16 weights).
  with_preprocessing: saved_model only, its signature then takes encoded image bytes.
  max_patches: NaFlex (a MAP-pooled ViT classifier, each image at its aspect ratio): the inputs are
  patches, mask and grid at this budget, as vit_jax.data.naflex_patches.patchify gives them;
  None: the budget the checkpoint records (a NaFlex run's params.npz), else images; 0
  (naflex_reading.SQUARE): images, whatever the checkpoint records.
  Raises an errors.UserError (one line: ExportError, CheckpointError, ...) and leaves
  `out` as it was when anything fails.
  """
  start = time.time()
  _check_naflex(max_patches, image_size, with_preprocessing)
  signature = functions.signature_of(checkpoint)
  if signature is not None:
    functions.check_options(signature, to, image_size=image_size, dtype=dtype,
                            with_preprocessing=with_preprocessing, max_patches=max_patches)
    batch = parse_batch(batch)
    return functions.export(checkpoint, out, to, format_module(to), signature,
                            image_size=image_size,
                            batch=None if batch in (None, "dynamic") else batch,
                            overwrite=overwrite, log=log)
  fmt = format_module(to)
  options = _options(to, fmt, batch, dtype, with_preprocessing, max_patches)
  output.check_writable(out, overwrite)
  with no_clobber.sole_writer(out, output.KIND):  # a concurrent export into `out` fails here
    source = source_lib.load_source(checkpoint, image_size,
                                    "float32" if dtype == "float16" else dtype, max_patches)
    if source.max_patches and max_patches is None:  # the file's budget: can the format?
      _options(to, fmt, batch, dtype, with_preprocessing, source.max_patches, from_file=True)
      if with_preprocessing:
        raise ExportError(f"--with_preprocessing decodes to a square image, and {checkpoint} "
                          f"is read as {source.reading.describe()}: add "
                          f"--max_patches={naflex_reading.SQUARE} to export it on square images")
    if source.max_patches:  # the verification batch at the budget: within memory?
      naflex_vit.check_budget_fits(source.module, source.max_patches,
                                   options.batch or VERIFY_BATCH, batch_flag="--batch")
    log(f"read {checkpoint}: {source.model_name}, {source.module.num_classes} classes, " +
        source.reading.describe(f"{source.image_size[0]}x{source.image_size[1]} px"))
    with output.staged(out) as staging:
      files, signature = fmt.write(source, options, staging)
      inputs, reference = verification_batch(source, options)
      difference = source_lib.relative_difference(fmt.run(staging, inputs), reference)
      tolerance = fmt.TOLERANCE[dtype]
      if not difference <= tolerance:
        raise ExportError(f"the {to} export differs from the Flax model by {difference:.2e} "
                          f"(max relative logit difference; tolerance {tolerance:.0e}): not "
                          "written")
      parity = {"max_relative_logit_difference": difference, "tolerance": tolerance,
                "runtime": fmt.RUNTIME, "reference": f"the Flax model ({source.dtype}, jax CPU)",
                "batch": len(reference),
                "inputs": _verification_inputs(source, with_preprocessing)}
      metadata.write(metadata.describe(
          source, fmt=to, files=files, signature=signature, parity=parity,
          batch=options.batch or "dynamic", in_graph_preprocessing=with_preprocessing), staging)
    return Result(out, to, difference, tolerance, fmt.RUNTIME, time.time() - start)


def _check_naflex(max_patches, image_size, with_preprocessing: bool) -> None:
  try:
    naflex_reading.check_request(max_patches)
  except ValueError as e:
    raise ExportError(str(e)) from None
  if not max_patches:  # the checkpoint's reading: source.load_source checks it
    return
  if image_size is not None:
    raise ExportError("--max_patches takes each image at its own size (NaFlex): leave "
                      "--image_size out")
  if with_preprocessing:
    raise ExportError("--with_preprocessing decodes to a square image; NaFlex inputs are "
                      "patchified by the client (vit_jax.data.naflex_patches.patchify)")


def _verification_inputs(source: source_lib.Source, with_preprocessing: bool) -> str:
  if source.max_patches:
    return (f"noise images of {len(source_lib.NAFLEX_SHAPES)} aspect ratios, seed "
            f"{source_lib.VERIFY_SEED}, patchified by vit_jax.data.naflex_patches")
  if with_preprocessing:
    return "encoded JPEG images"
  return f"uniform noise in [-1, 1], seed {source_lib.VERIFY_SEED}"


def verification_batch(source: source_lib.Source, options: Options):
  """(inputs for the export, the Flax model's logits for them)."""
  if source.max_patches:
    inputs = source_lib.verification_patches(options.batch or VERIFY_BATCH,
                                             source.module.patch_size, source.max_patches)
    return inputs, source.flax_logits(inputs)
  images = source_lib.verification_images(options.batch or VERIFY_BATCH, source.image_size)
  if not options.with_preprocessing:
    return images, source.flax_logits(images)
  from vit_jax.export import preprocessing  # TensorFlow only where it is needed
  encoded = preprocessing.verification_jpegs(len(images), source.image_size,
                                             source_lib.VERIFY_SEED)
  return encoded, source.flax_logits(preprocessing.preprocess_eagerly(encoded,
                                                                      source.image_size))
