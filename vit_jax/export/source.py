"""What every export format starts from: the checkpoint's Flax model and weights, what the
metadata says about them, the fixed verification batch and the parity measure."""

import dataclasses
import hashlib
import os
from typing import Any, Dict, List, Optional, Tuple

import jax
import jax.numpy as jnp
import numpy as np

from vit_jax.base import errors, storage
from vit_jax.checkpoints import hub, naflex_reading, npz
from vit_jax.families.vit import naflex_model as naflex_vit
from vit_jax.families.vit import model as vit
from vit_jax.models import family_registry

DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16}
# What StableHLO and SavedModel exports are lowered for (lowering needs no such device);
# they are verified on the CPU.
PLATFORMS = ("cpu", "cuda", "tpu")
VERIFY_SEED = 0
# jax2tf, jax.export (flatbuffers) and ONNX (protobuf) keep a model in one buffer that
# cannot exceed 2 GiB; weights above this do not fit with the graph around them.
MAX_WEIGHT_BYTES = 1_900_000_000
IMAGENET_CLASSES = 1000


class ExportError(errors.InvalidInput):
  """A checkpoint, option or output that cannot be exported; the message is one line."""


@dataclasses.dataclass(frozen=True)
class Source:
  """The model to export, at the resolution and compute dtype it is exported with."""
  checkpoint: str  # as the user gave it
  path: str  # resolved path or URL
  module: vit.VisionTransformer
  params: Dict[str, Any]
  image_size: Tuple[int, int]  # (height, width) traced at
  dtype: str
  checkpoint_image_size: Tuple[int, int]  # the file's own; another is resized in the model
  multi_label: bool = False  # saved by a multi-label run: probabilities are sigmoids
  # NaFlex: the model takes patches, mask and grid at this patch budget (the
  # client patchifies: vit_jax.data.naflex_patches), not images.
  max_patches: Optional[int] = None
  recorded_max_patches: Optional[int] = None  # the budget the checkpoint records

  @property
  def reading(self) -> naflex_reading.Reading:
    """NaFlex at max_patches or images, and whether that is the checkpoint's own."""
    return naflex_reading.Reading(self.max_patches, self.recorded_max_patches)

  @property
  def activation(self) -> str:
    """How `probabilities` come from logits: 'sigmoid' (multi-label) or 'softmax'."""
    return "sigmoid" if self.multi_label else "softmax"

  def logits_fn(self):
    """inputs (see apply) -> float32 logits, weights closed over."""
    return lambda inputs: self.apply(self.params, inputs)

  def apply(self, params, inputs):
    """The model's logits, given weights, for images [B, H, W, 3] float32 in [-1, 1], or
    for NaFlex inputs {'patches', 'mask', 'grid'} (input_specs)."""
    if self.max_patches:
      return _apply_naflex(self.naflex_module, params, inputs)
    return _apply(self.module, params, inputs)

  @property
  def naflex_module(self) -> naflex_vit.NaFlexViT:
    """The NaFlexViT running the params, its position table at the file's own grid."""
    return naflex_vit.from_vit(self.module,
                               self.checkpoint_image_size[0] // self.module.patch_size)

  def input_specs(self, batch: Optional[int]) -> Dict[str, Tuple[tuple, np.dtype]]:
    """name -> (shape, dtype) of the exported model's inputs, in call order (batch None:
    dynamic): 'images', or NaFlex's 'patches', 'mask' and 'grid'."""
    if not self.max_patches:
      return {"images": ((batch, *self.image_size, 3), np.dtype(np.float32))}
    patch, budget = self.module.patch_size, self.max_patches
    return {"patches": ((batch, budget, patch * patch * 3), np.dtype(np.float32)),
            "mask": ((batch, budget), np.dtype(np.int32)),
            "grid": ((batch, 2), np.dtype(np.int32))}

  def flax_logits(self, images) -> np.ndarray:
    """The reference every export is checked against. In float32 the weights are
    arguments of one program per architecture and batch shape in a process (exporting a
    checkpoint to several formats compiles it once, and hashes no weights into XLA's cache
    keys). In bfloat16 they are constants, as in the exported programs: XLA rounds
    constants to bfloat16 when it compiles, but may keep arguments' float32 values
    (xla_allow_excess_precision), 2e-3 apart on a 2-block model."""
    if self.dtype == "float32" and self.max_patches:
      return np.asarray(_jitted_naflex(self.naflex_module, self.params, images))
    if self.dtype == "float32":
      return np.asarray(_jitted_apply(self.module, self.params, images))
    return np.asarray(jax.jit(self.logits_fn())(images))

  @property
  def architecture(self):
    """The settings the module was built with (its family's dataclass: metadata.json)."""
    return family_registry.for_module(self.module).names.architecture_of(self.module)

  @property
  def model_name(self) -> str:
    """The released name (ViT-B_16, R50+ViT-B_16, ...) with its variants, or the sizes."""
    return family_registry.for_module(self.module).names.name_of(self.module)


def _apply(module: vit.VisionTransformer, params, images):
  return module.apply({"params": params}, images, train=False)


_jitted_apply = jax.jit(_apply, static_argnums=0)


def _apply_naflex(module: naflex_vit.NaFlexViT, params, inputs):
  return module.apply({"params": params}, inputs["patches"], inputs["mask"], inputs["grid"])


_jitted_naflex = jax.jit(_apply_naflex, static_argnums=0)


def load_source(checkpoint: str, image_size: Optional[npz.ImageSize], dtype: str,
                max_patches: Optional[int] = None) -> Source:
  """The checkpoint loaded as load_npz does, run at image_size (a side or (height, width),
  multiples of the stride; the model resizes its position embedding, see
  hub.load_for_inference), or on NaFlex inputs of max_patches patches (MAP-pooled ViTs;
  None: the budget the checkpoint records, if any; naflex_reading.SQUARE: images);
  raises an errors.UserError (one line: CheckpointError, ExportError, ...) for what cannot
  be read or exported."""
  path = hub.resolve(checkpoint)  # a released or hf-hub: name is fetched first
  reading = naflex_reading.of_file(path, max_patches)
  naflex_reading.check_square_size(checkpoint, reading, image_size, "export")
  module, params, size = hub.load_for_inference(path, image_size)
  weight_bytes = sum(np.asarray(p).nbytes for p in jax.tree.leaves(params))
  if weight_bytes > MAX_WEIGHT_BYTES:
    raise ExportError(f"{checkpoint}: {weight_bytes / 2**30:.1f} GiB of weights do not fit "
                      "the 2 GiB that one serialized graph can hold; export a smaller model")
  multi_label = path.endswith(".npz") and npz.read_multi_label(path)
  if family_registry.geometry(module).resizes_in_forward:
    native = npz.side_pair(npz.native_image_size(module, params))
  else:  # at another size than the file's, the params were resized on loading
    native = size if image_size is None else npz.side_pair(
        npz.native_image_size(*npz.load_npz(path)))
  found = Source(checkpoint, path, module.clone(dtype=DTYPES[dtype]), params, size, dtype,
                 native, multi_label, reading.max_patches, reading.recorded)
  if reading.max_patches:
    family_registry.for_module(module).refuse("naflex", checkpoint)  # one line, not a traceback
    try:
      found.naflex_module  # pylint: disable=pointless-statement (a model NaFlex runs?)
    except errors.InvalidInput as e:
      raise ExportError(f"{checkpoint}: --max_patches: {e}") from None
  return found


def describe_inputs(source: Source, batch: Optional[int]) -> Dict[str, Dict[str, Any]]:
  """metadata.json's signature inputs: name -> {'shape', 'dtype'} (batch None: dynamic)."""
  return {name: {"shape": [batch, *shape[1:]], "dtype": dtype.name}
          for name, (shape, dtype) in source.input_specs(batch).items()}


# NaFlex verification: images of these shapes (tall, wide, square, ...) in turn.
NAFLEX_SHAPES = ((40, 20), (20, 48), (33, 33), (17, 29))


def verification_patches(batch: int, patch: int, max_patches: int) -> Dict[str, np.ndarray]:
  """The fixed NaFlex batch: noise images of NAFLEX_SHAPES in turn (mixed aspect ratios
  and grids), patchified as clients do (vit_jax.data.naflex_patches)."""
  from vit_jax.data import naflex_patches  # pylint: disable=import-outside-toplevel (PIL)
  rng = np.random.default_rng(VERIFY_SEED)
  shapes = [NAFLEX_SHAPES[i % len(NAFLEX_SHAPES)] for i in range(batch)]
  rows = [naflex_patches.patchify(rng.integers(0, 256, (*shape, 3), np.uint8), patch,
                                  max_patches) for shape in shapes]
  return {name: np.stack(part) for name, part in zip(("patches", "mask", "grid"), zip(*rows))}


def verification_images(batch: int, image_size: Tuple[int, int]) -> np.ndarray:
  """The fixed batch every export is checked on: uniform noise in the model's range, at
  (height, width)."""
  rng = np.random.default_rng(VERIFY_SEED)
  return rng.uniform(-1, 1, (batch, *image_size, 3)).astype(np.float32)


def relative_difference(ours: np.ndarray, reference: np.ndarray) -> float:
  """max |ours - reference| / max |reference|, the measure of the project's fixtures."""
  ours, reference = np.asarray(ours, np.float64), np.asarray(reference, np.float64)
  if ours.shape != reference.shape:
    raise ExportError(f"the export returned logits of shape {ours.shape}, the Flax model "
                      f"{reference.shape}")
  return float(np.max(np.abs(ours - reference)) / max(np.max(np.abs(reference)), 1e-30))


def sha256(path: str) -> str:
  """Of the file, or of a model folder's files (names and bytes, in sorted order)."""
  digest = hashlib.sha256()
  if storage.isdir(path):  # a local model folder: formats reads no other
    for root, _, files in sorted(os.walk(path)):
      for name in sorted(files):
        digest.update(os.path.relpath(os.path.join(root, name), path).encode() + b"\0")
        _update(digest, os.path.join(root, name))
  else:
    _update(digest, path)
  return digest.hexdigest()


def _update(digest, path: str) -> None:
  with storage.open_read(path) as f:
    while chunk := f.read(1 << 22):
      digest.update(chunk)


def imagenet_wordnet_ids() -> List[str]:
  """ImageNet-1k's class WordNet IDs in label order, shipped inside tensorflow_datasets
  (so they are there offline)."""
  import tensorflow_datasets as tfds
  path = os.path.join(os.path.dirname(tfds.__file__), "datasets", "imagenet2012", "labels.txt")
  return storage.read_text(path).split()


def class_names(source: Source) -> Dict[str, Any]:
  """{'names': [...] or None, 'from': where they came from}: the run's names saved with
  its params.npz, else ImageNet-1k's WordNet IDs for a 1000-way head."""
  names = None
  if source.path.endswith(".npz"):
    try:
      names = npz.read_class_names(source.path)
    except (ValueError, OSError):
      names = None
  if names is not None and len(names) == source.module.num_classes:
    return {"names": list(names), "from": "the checkpoint"}
  if source.module.num_classes == IMAGENET_CLASSES:
    return {"names": imagenet_wordnet_ids(),
            "from": "ImageNet-1k WordNet IDs (tensorflow_datasets imagenet2012/labels.txt)"}
  return {"names": None, "from": "none: outputs are class indices"}
