"""Released .npz checkpoints <-> (module, params), for every model family.

The family is told by the arrays (vit_jax.models.family_registry: each family recognises
its released layout, reads it and writes it back). Files are read from local paths or URLs
(gs://, https://) through vit_jax.base.storage, are never unpickled, and are validated key
by key against the module they build, so a wrong file fails with one line that names the
problem instead of producing junk.
timm and Hugging Face checkpoints (`.safetensors`, `.pth`/`.bin`, model folders) are read
through vit_jax.checkpoints.formats into the same arrays.
"""

import io
import os
from typing import Any, Dict, Mapping, Optional, Sequence, Tuple

import numpy as np

from vit_jax.base import errors, storage
from vit_jax.checkpoints import class_names as class_names_lib
from vit_jax.checkpoints import formats, npz_archive
from vit_jax.checkpoints.class_names import (  # pylint: disable=unused-import
    read_class_names, read_max_patches, read_multi_label)
from vit_jax.checkpoints.npz_checks import (  # pylint: disable=unused-import
    CheckpointError, ImageSize, ImageSizeError, check_image_size, nonfinite_arrays, side_pair)
from vit_jax.models import family_registry

LORA_SETTINGS = "lora/settings"  # the entry that makes an .npz a LoRA adapters file


def save_npz(params: Any, path: str, *, class_names: Optional[Sequence[str]] = None,
             allow_nonfinite: bool = False, multi_label: bool = False,
             max_patches: Optional[int] = None) -> None:
  """Writes params in the released layout (flat `/` keys, float32, one entry per block
  also for scan_layers models), atomically. A head of 0 classes (a feature extractor,
  num_classes=0) is left out: the file has no head, as load_npz expects of one.

  class_names: the head's classes in label order, carried in the file's zip comment
  (see vit_jax.checkpoints.class_names; read them back with read_class_names).
  multi_label: the head scores classes independently (sigmoid; stored with the names).
  max_patches: the NaFlex patch budget the model was trained at (config.pp.max_patches),
  carried in the same comment, so that every tool reads the file as NaFlex at it
  (vit_jax.checkpoints.naflex_reading; read it back with read_max_patches).
  allow_nonfinite: write NaN/Inf weights too; by default they are refused (CheckpointError)
  as load_npz refuses them, so that no file is written that every loader then rejects.
  """
  if isinstance(params, Mapping) and set(params) == {"params"}:
    params = params["params"]
  family = family_registry.for_params(params) if isinstance(params, Mapping) else None
  if family is None:
    got = f"a dict of {', '.join(map(repr, list(params)[:4]))}" if isinstance(
        params, Mapping) else f"a {type(params).__name__}"
    raise errors.InvalidInput(f"save_npz takes a ViT's params (the dict of 'Transformer', "
                              "'embedding', ... that module.init or load_npz gives), or those "
                              f"of another registered model family, got {got}")
  flat = family.released_file.to_arrays(params)
  if np.shape(flat.get("head/kernel", ()))[-1:] == (0,):
    flat = {key: value for key, value in flat.items() if not key.startswith("head/")}
  if class_names is not None:
    head_classes = np.shape(flat.get("head/kernel", ()))[-1:]
    if head_classes != (len(class_names),):
      raise errors.InvalidInput(
          f"{len(class_names)} class names for a head of "
          f"{head_classes[0] if head_classes else 'no'} classes: pass one name "
          "per class of the head, or none")
  flat = {key: np.asarray(value, np.float32) for key, value in flat.items()}
  bad = None if allow_nonfinite else nonfinite_arrays(flat)
  if bad:
    raise CheckpointError(
        f"not saving {os.fspath(path)}: NaN/Inf weights in {bad}; every loader would refuse "
        "the file (a diverged run?): save finite params, or save anyway with "
        "allow_nonfinite=True (load it back with the same option)")
  buffer = io.BytesIO()
  np.savez(buffer, **flat)
  if max_patches is not None and (not isinstance(max_patches, int) or max_patches < 1):
    raise errors.InvalidInput(f"max_patches={max_patches!r}: pass the NaFlex patch budget "
                              "the model was trained at (a whole number >= 1), or none")
  data, sidecar = class_names_lib.with_class_names(buffer.getvalue(), class_names,
                                                   multi_label, max_patches)
  path = os.fspath(path)
  if sidecar is not None:  # first: the .npz appearing is what finishes a run
    storage.write_atomic(class_names_lib.sidecar_path(path), sidecar)
  storage.write_atomic(path, data)
  if sidecar is None:  # an earlier file's long list must not be read as this file's
    storage.remove(class_names_lib.sidecar_path(path))


def read_arrays(path: str) -> Dict[str, np.ndarray]:
  """A checkpoint's arrays as stored: an .npz (see npz_archive.read_npz), or a timm / Hugging Face
  file or folder already mapped to the released layout (see formats)."""
  if formats.is_foreign(path):
    try:
      return formats.read_foreign(path)
    except formats.FormatError as e:
      raise CheckpointError(f"{path} {e}") from None
  return npz_archive.read_npz(path)


def load_npz(path: str, *, image_size: Optional[ImageSize] = None,
             num_classes: Optional[int] = None, model_name: Optional[str] = None,
             pre_logits: Optional[bool] = None, allow_nonfinite: bool = False,
             strict_image_size: bool = False, patch_size: Optional[int] = None,
             **model_overrides) -> Tuple[Any, Dict[str, Any]]:
  """Loads a released-format .npz as (module, params), of whichever family its arrays are.

  Args:
    path: local path or URL (gs://my-bucket/run/params.npz) of an .npz; or a local
      timm / Hugging Face `.safetensors` or `.pth`/`.bin` file, or model folder (see
      vit_jax.checkpoints.formats).
    image_size: input side (or (h, w)) to build for; the position embedding is
      resized when it differs from the file's. None keeps the file's grid.
    num_classes: None keeps the file's head (and pre_logits). Another count
      replaces the head by a zero-initialised one (the fine-tuning setup).
    model_name: released name to build; None infers the architecture from shapes.
      Pooling (token, gap, map) and position embedding (learned, sincos2d) are always
      the file's.
    pre_logits: keep the representation layer; default: keep it iff the head is kept.
    allow_nonfinite: load weights holding NaN or Inf instead of refusing the file
      (for experts inspecting a diverged run).
    strict_image_size: refuse an image_size that is not a multiple of the model's
      stride instead of warning that the remainder is dropped (see check_image_size).
    patch_size: a patch size other than the file's (plain ViTs): the patch-embedding
      kernel is PI-resized (FlexiViT) and, at the file's image size unless image_size
      says otherwise, the position embedding goes to the new grid.
    **model_overrides: other VisionTransformer attributes (dropout_rate, dtype, ...).

  MLP-Mixer files (a `stem` conv) load as an MlpMixer (vit_jax.families.mixer.npz_file):
  another image size resizes its token-mixing MLPs (vit_jax.families.mixer.resize).

  Returns:
    The module and a nested dict of float32 host (numpy) arrays; place them on
    devices with jax.device_put(params, sharding).

  Raises:
    CheckpointError (one line) for a file that cannot be used; ImageSizeError for an
    image_size the model cannot run at.
  """
  arrays = read_arrays(path)
  if LORA_SETTINGS in arrays:
    raise CheckpointError(f"{path} is a LoRA run's adapters file, not a model: pass that "
                          "run's params.npz (the merged model), or rebuild it with python -m "
                          f"vit_jax.lora BASE {path} OUT")
  family = family_registry.for_arrays(arrays)
  return family.part("released_file", path).load(
      arrays, path, image_size=image_size, num_classes=num_classes, model_name=model_name,
      pre_logits=pre_logits, allow_nonfinite=allow_nonfinite,
      strict_image_size=strict_image_size, patch_size=patch_size, **model_overrides)


def native_image_size(module, params) -> int:
  """The input side a model's params were made for (a ViT's position table's, a Mixer's
  token-mixing width's), whatever its family."""
  return family_registry.for_module(module).part(
      "released_file", type(module).__name__).native_image_size(module, params)


IMAGE_SIZE_HELP = ("default: the checkpoint's own. Another size (each side a multiple of the "
                   "model's stride) resizes the position embedding inside the model.")
ALLOW_NONFINITE_HELP = ("Load a checkpoint even if some weights are NaN or Inf (refused by "
                        "default: they make every output NaN).")
