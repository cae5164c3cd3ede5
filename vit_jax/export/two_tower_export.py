"""A two-tower model (LiT, SigLIP) exported as two artefacts, each verified in its runtime:
OUT/image_tower/ (images [B, side, side, 3] float32 in [-1, 1] -> L2-normalised embeddings)
and OUT/text_tower/ (token ids [B, L] int32 -> L2-normalised embeddings), the tokenizer file
copied beside them and one metadata.json saying how to combine them: logits = logit_scale *
zimg @ ztxt.T (+ logit_bias), read with a softmax over the texts (LiT) or a sigmoid per pair
(SigLIP). Formats: stablehlo (jax.export) and onnx (jax2onnx, onnxruntime).
"""

import dataclasses
import datetime
import json
import os
import shutil
import time
from typing import Callable, Dict, Optional, Tuple

import jax
import jax.numpy as jnp
import numpy as np

from vit_jax.base import no_clobber, storage
from vit_jax.families.two_tower import npz_file as two_tower_load
from vit_jax.families.two_tower import opening as two_tower_open
from vit_jax.export import metadata, output
from vit_jax.export import source as source_lib

FORMATS = {"stablehlo": "model.stablehlo", "onnx": "model.onnx"}
TOLERANCE = {"stablehlo": 1e-5, "onnx": 1e-4}  # as the formats' own (export/stablehlo, onnx_model)
VERIFY_BATCH = 2  # rows checked for a dynamic batch
RUNTIMES = {"stablehlo": "jax.export.deserialize (XLA CPU)",
            "onnx": "onnxruntime (CPUExecutionProvider)"}


@dataclasses.dataclass(frozen=True)
class Tower:
  """One tower as a function of one input (weights closed over)."""
  name: str  # image_tower | text_tower
  fn: Callable
  input_name: str  # images | tokens
  input_shape: Tuple[int, ...]  # without the batch dimension
  input_dtype: type
  verification: np.ndarray  # the fixed batch the export is checked on (batch VERIFY_BATCH+)


@dataclasses.dataclass(frozen=True)
class TwoTowerResult:
  out: str
  format: str
  differences: Dict[str, float]  # tower -> max relative embedding difference
  tolerance: float
  seconds: float

  def summary(self) -> str:
    towers = ", ".join(f"{t} {d:.2e}" for t, d in self.differences.items())
    return (f"wrote {self.out} ({self.format}: image_tower/, text_tower/); verified in its "
            f"runtime: max relative embedding difference {towers} (tolerance "
            f"{self.tolerance:.0e}) in {self.seconds:.0f}s")


def check_options(to: str, image_size, dtype: str, with_preprocessing: bool) -> None:
  """What a two-tower export cannot do, refused in one line before the load."""
  if to not in FORMATS:
    raise source_lib.ExportError(f"a two-tower model exports --to={' or '.join(FORMATS)} "
                                 f"(image and text tower apart), not {to}")
  if dtype != "float32" or with_preprocessing:
    option = "with_preprocessing" if with_preprocessing else f"dtype={dtype}"
    raise source_lib.ExportError(f"a two-tower export does not support {option}: export "
                                 "float32 towers that take preprocessed images")
  if image_size and side_pair(image_size)[0] != side_pair(image_size)[1]:
    raise source_lib.ExportError(f"a two-tower image tower takes square images, got "
                                 f"--image_size={image_size}")


def side_pair(image_size) -> Tuple[int, int]:
  """(height, width) of a side or a pair."""
  return (image_size, image_size) if isinstance(image_size, int) else tuple(image_size)


def towers(model, params, side: int, text_length: int, rows: int):
  """(image tower, text tower) of a loaded TwoTower, with their verification batches."""
  variables = {"params": params}
  tokens = np.random.default_rng(source_lib.VERIFY_SEED).integers(
      0, model.txt.vocab_size, (rows, text_length)).astype(np.int32)
  return (Tower("image_tower",
                lambda x: model.apply(variables, x, method=model.embed_images), "images",
                (side, side, 3), jnp.float32, source_lib.verification_images(rows, (side, side))),
          Tower("text_tower", lambda t: model.apply(variables, t, method=model.embed_texts),
                "tokens", (text_length,), jnp.int32, tokens))


def _spec(tower: Tower, batch: Optional[int]) -> jax.ShapeDtypeStruct:
  dims = ", ".join(map(str, tower.input_shape))
  shape = (jax.export.symbolic_shape(f"B, {dims}") if batch is None
           else (batch, *tower.input_shape))
  return jax.ShapeDtypeStruct(shape, tower.input_dtype)


def write_and_run(fmt, tower: Tower, batch: Optional[int], folder: str) -> np.ndarray:
  """Writes the tower's artefact into folder with format module fmt (export.stablehlo or
  export.onnx_model) and returns what its runtime computes for the verification batch."""
  os.makedirs(folder)
  to = format_name(fmt)
  path = os.path.join(folder, FORMATS[to])
  if to == "stablehlo":
    exported = jax.export.export(jax.jit(tower.fn), platforms=source_lib.PLATFORMS)(
        _spec(tower, batch))
    storage.write_atomic(path, bytes(exported.serialize()))
    return np.asarray(jax.export.deserialize(bytearray(storage.read_bytes(path))).call(
        tower.verification))
  fmt.onnx.save(fmt.convert(tower.fn, [_spec(tower, batch)], [tower.input_name],
                            ["embeddings"]), path)
  session = fmt.session(folder, FORMATS[to])
  return session.run(["embeddings"], {tower.input_name: tower.verification})[0]


def _describe(to, params, info, side, batch, width, parity, tokenizer, checkpoint, path):
  """metadata.json of a two-tower export (batch None: dynamic)."""
  shape = [batch]
  return {
      "format": to, "model": "two-tower", "family": info.family,
      "batch": batch or "dynamic", "image_size": [side, side],
      "towers": {
          "image_tower": {"files": {"model": f"image_tower/{FORMATS[to]}"},
                          "inputs": {"images": {"shape": shape + [side, side, 3],
                                                "dtype": "float32"}},
                          "outputs": {"embeddings": {"shape": shape + [int(width)],
                                                     "dtype": "float32"}},
                          "preprocessing": metadata.preprocessing_contract((side, side), False),
                          "parity": parity["image_tower"]},
          "text_tower": {"files": {"model": f"text_tower/{FORMATS[to]}"},
                         "inputs": {"tokens": {"shape": shape + [info.text_length],
                                               "dtype": "int32"}},
                         "outputs": {"embeddings": {"shape": shape + [int(width)],
                                                    "dtype": "float32"}},
                         "tokenizer": tokenizer, "parity": parity["text_tower"]}},
      "embeddings": "L2-normalised",
      "logit_scale": float(np.exp(np.asarray(params["t"])[0])),
      "logit_bias": float(np.asarray(params["b"])[0]) if "b" in params else None,
      "logits": "logit_scale * image_embeddings @ text_embeddings.T + logit_bias (if any)",
      "scores": ("softmax over the texts" if info.family == "lit"
                 else "sigmoid of each (image, text) logit"),
      "source_checkpoint": {"path": checkpoint, "sha256": source_lib.sha256(path)},
      "exported": {"utc": datetime.datetime.now(datetime.timezone.utc).isoformat(
          timespec="seconds"), "jax": jax.__version__}}


def format_name(fmt) -> str:
  """'stablehlo' or 'onnx' of a format module."""
  return "onnx" if fmt.__name__.endswith("onnx_model") else fmt.__name__.rsplit(".", 1)[-1]


def export(checkpoint: str, out: str, fmt, *, image_size=None, batch: Optional[int] = None,
           overwrite: bool = False, log: Callable[[str], None] = print) -> TwoTowerResult:
  """Exports a two-tower name, .npz or folder into `out` with format module fmt (checked by
  check_options; see the module docstring); batch None: dynamic. Raises a one-line
  errors.UserError and leaves `out` as it was on failure."""
  start = time.time()
  to = format_name(fmt)
  output.check_writable(out, overwrite)
  with no_clobber.sole_writer(out, output.KIND):
    path = two_tower_open.local_checkpoint(checkpoint)
    model, params, info = two_tower_load.load_two_tower(path)  # tokenizer copied, not read
    side = two_tower_open.image_size(info, image_size and side_pair(image_size)[0])
    for name, tree in (("image", params["img"]), ("text", params["txt"])):
      nbytes = sum(np.asarray(p).nbytes for p in jax.tree.leaves(tree))
      if nbytes > source_lib.MAX_WEIGHT_BYTES:
        raise source_lib.ExportError(f"{checkpoint}: the {name} tower's {nbytes / 2**30:.1f} "
                                     "GiB of weights do not fit one serialized graph (2 GiB)")
    log(f"read {checkpoint}: {info.family} two-tower model, images {side}x{side} px, "
        f"{info.text_length} tokens")
    differences, parity = {}, {}
    with output.staged(out) as staging:
      for tower in towers(model, params, side, info.text_length, batch or VERIFY_BATCH):
        reference = np.asarray(jax.jit(tower.fn)(tower.verification))
        ours = write_and_run(fmt, tower, batch, os.path.join(staging, tower.name))
        differences[tower.name] = source_lib.relative_difference(ours, reference)
        if not differences[tower.name] <= TOLERANCE[to]:
          raise source_lib.ExportError(
              f"the {to} {tower.name} differs from the Flax model by "
              f"{differences[tower.name]:.2e} (tolerance {TOLERANCE[to]:.0e}): not written")
        parity[tower.name] = {
            "max_relative_embedding_difference": differences[tower.name],
            "tolerance": TOLERANCE[to], "runtime": RUNTIMES[to], "batch": len(reference),
            "reference": "the Flax model (float32, jax CPU)",
            "inputs": f"uniform noise / random token ids, seed {source_lib.VERIFY_SEED}"}
        width = reference.shape[-1]
      tokenizer = None
      if info.tokenizer:
        tokenizer = os.path.basename(info.tokenizer)
        shutil.copyfile(info.tokenizer, os.path.join(staging, tokenizer))
      described = _describe(to, params, info, side, batch, width, parity, tokenizer,
                            checkpoint, path)
      storage.write_atomic(os.path.join(staging, metadata.FILE),
                           json.dumps(described, indent=2, ensure_ascii=False) + "\n")
    return TwoTowerResult(out, to, differences, TOLERANCE[to], time.time() - start)
