"""Released .npz checkpoints <-> (module, params).

Files are read from local paths or URLs (gs://, https://) through vit_jax.base.storage, are
never unpickled, and are validated key by key against the module they build, so a
wrong file fails with one line that names the problem instead of producing junk.
timm and Hugging Face checkpoints (`.safetensors`, `.pth`/`.bin`, model folders) are read
through vit_jax.checkpoints.formats into the same arrays.
"""

import dataclasses
import io
import logging
import os
from typing import Any, Dict, Mapping, Optional, Sequence, Tuple

import numpy as np
from flax import traverse_util

from vit_jax.base import console, errors, storage
from vit_jax.checkpoints import class_names as class_names_lib
from vit_jax.checkpoints import formats, npz_archive, npz_checks
from vit_jax.families.mixer import npz_file as mixer_npz
from vit_jax.families.vit import npz_layout
from vit_jax.checkpoints.class_names import (  # pylint: disable=unused-import
    read_class_names, read_multi_label)
from vit_jax.checkpoints.npz_checks import (  # pylint: disable=unused-import
    SINCOS_IMAGE_SIZE, CheckpointError, ImageSize, ImageSizeError, check_against, check_finite,
    check_image_size, expected_shapes, nonfinite_arrays, side_pair)
from vit_jax.models import encoder_blocks, patch_resize, posemb
from vit_jax.families.mixer import model as mixer
from vit_jax.families.vit import model as vit
from vit_jax.families.vit import names as zoo

POSEMB_KEY = npz_layout.POSEMB
LORA_SETTINGS = "lora/settings"  # the entry that makes an .npz a LoRA adapters file


def save_npz(params: Any, path: str, *, class_names: Optional[Sequence[str]] = None,
             allow_nonfinite: bool = False, multi_label: bool = False) -> None:
  """Writes params in the released layout (flat `/` keys, float32, one entry per block
  also for scan_layers models), atomically. A head of 0 classes (a feature extractor,
  num_classes=0) is left out: the file has no head, as load_npz expects of one.

  class_names: the head's classes in label order, carried in the file's zip comment
  (see vit_jax.checkpoints.class_names; read them back with read_class_names).
  multi_label: the head scores classes independently (sigmoid; stored with the names).
  allow_nonfinite: write NaN/Inf weights too; by default they are refused (CheckpointError)
  as load_npz refuses them, so that no file is written that every loader then rejects.
  """
  if isinstance(params, Mapping) and set(params) == {"params"}:
    params = params["params"]
  is_mixer = isinstance(params, Mapping) and mixer.is_mixer_params(params)
  if not isinstance(params, Mapping) or ("Transformer" not in params and not is_mixer):
    got = f"a dict of {', '.join(map(repr, list(params)[:4]))}" if isinstance(
        params, Mapping) else f"a {type(params).__name__}"
    raise errors.InvalidInput(f"save_npz takes a ViT's params (the dict of 'Transformer', "
                              "'embedding', ..., or a Mixer's of 'stem', 'MixerBlock_0', ... "
                              f"that module.init or load_npz gives), got {got}")
  flat = npz_layout.to_saved_layout(
      traverse_util.flatten_dict(mixer.released_block_layout(params), sep="/"))
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
  data, sidecar = class_names_lib.with_class_names(buffer.getvalue(), class_names,
                                                   multi_label)
  path = os.fspath(path)
  if sidecar is not None:  # first: the .npz appearing is what finishes a run
    storage.write_atomic(class_names_lib.sidecar_path(path), sidecar)
  storage.write_atomic(path, data)
  if sidecar is None:  # an earlier file's long list must not be read as this file's
    storage.remove(class_names_lib.sidecar_path(path))


def _not_square(path: str) -> CheckpointError:
  return CheckpointError(
      f"{path}: {POSEMB_KEY} has no square grid of patch tokens, and only square grids are "
      f"resized or read as an image size: pass the image_size (height, width) it was saved at")


@dataclasses.dataclass(frozen=True)
class Checkpoint:
  """A checkpoint's float32 arrays in the released layout, and what they hold."""
  flat: Dict[str, np.ndarray]
  architecture: zoo.Architecture
  num_classes: Optional[int]  # None: no head
  representation_size: Optional[int]  # None: no pre_logits layer
  two_tower: bool = False  # the image tower of a LiT / SigLIP file (its text tower unread)

  def image_size(self, module: vit.VisionTransformer) -> Tuple[int, int]:
    """The (height, width) the file's position embedding was made for (square grids)."""
    if module.posemb == "sincos2d":
      return SINCOS_IMAGE_SIZE, SINCOS_IMAGE_SIZE
    side = npz_checks.native_image_size(module, {"Transformer": {"posembed_input": {
        "pos_embedding": self.flat[POSEMB_KEY]}}})
    return side, side


def native_image_size(module, params) -> int:
  """The input side a model's params were made for: a ViT's position table's (224, 384,
  ...; sincos2d: SINCOS_IMAGE_SIZE), a Mixer's token-mixing width's (its square grid)."""
  if isinstance(module, mixer.MlpMixer):
    return mixer_npz.native_image_size(module, params)[0]
  return npz_checks.native_image_size(module, params)


def read_arrays(path: str) -> Dict[str, np.ndarray]:
  """A checkpoint's arrays as stored: an .npz (see npz_archive.read_npz), or a timm / Hugging Face
  file or folder already mapped to the released layout (see formats)."""
  if formats.is_foreign(path):
    try:
      return formats.read_foreign(path)
    except formats.FormatError as e:
      raise CheckpointError(f"{path} {e}") from None
  return npz_archive.read_npz(path)


def read_checkpoint(path: str, *, model_name: Optional[str] = None,
                    arrays: Optional[Dict[str, np.ndarray]] = None) -> Checkpoint:
  """The arrays of any checkpoint load_npz reads, with the architecture they imply.

  model_name: a released name whose sizes the file must have (its pooling and position
  embedding are still the file's: a big_vision MAP or sincos2d B/16 is a ViT-B_16).
  arrays: the file's arrays when already read (read_arrays), else they are read here.
  Raises CheckpointError (one line) for a file that is no ViT checkpoint, naming what it
  holds, or whose arrays fit no layout.
  """
  arrays = read_arrays(path) if arrays is None else arrays
  if mixer_npz.holds_mixer(arrays):
    raise CheckpointError(f"{path} is an MLP-Mixer checkpoint; this takes ViT checkpoints "
                          "only (Mixers load with load_npz and train with vit_jax.main: "
                          "docs/mixer.md)")
  if LORA_SETTINGS in arrays:
    raise CheckpointError(f"{path} is a LoRA run's adapters file, not a model: pass that "
                          "run's params.npz (the merged model), or rebuild it with python -m "
                          f"vit_jax.lora BASE {path} OUT")
  try:
    flat = npz_layout.to_released_layout(arrays)
    npz_layout.check_dtypes(flat)
    flat = {k: np.asarray(v, np.float32) for k, v in flat.items()}
    architecture, file_classes, file_representation = npz_layout.infer_architecture(flat)
  except KeyError as e:
    raise CheckpointError(f"{path} is not a ViT checkpoint: key {e.args[0]} is missing (the "
                          f"file holds {npz_layout.describe(arrays)})") from None
  except npz_layout.LayoutError as e:
    raise CheckpointError(f"{path} is not a usable ViT checkpoint: {e} (the file is damaged "
                          "or was edited: save it again from the model)") from None
  if architecture.posemb == "sincos2d":
    console.log.info("%s has no position-embedding table: a big_vision posemb='sincos2d' "
                     "model (fixed 2-D sin-cos embeddings, any image size)", path)
  if model_name is not None:
    architecture = dataclasses.replace(zoo.get_architecture(model_name),
                                       classifier=architecture.classifier,
                                       posemb=architecture.posemb)
  two_tower = any(key.startswith(("txt/", "params/txt/")) for key in arrays)
  return Checkpoint(flat, architecture, file_classes, file_representation, two_tower)


KERNEL_KEY = "embedding/kernel"


def with_patch_size(checkpoint: Checkpoint, patch_size: int, path: str
                    ) -> Tuple[Checkpoint, Tuple[int, int]]:
  """(the checkpoint with its patch-embedding kernel PI-resized to patch_size (FlexiViT; see
  vit_jax.models.patch_resize), the image size in pixels it was made for): callers keep
  that size, so the position embedding goes to the new, finer or coarser, grid."""
  architecture, file_patch = checkpoint.architecture, checkpoint.flat[KERNEL_KEY].shape[0]
  as_saved = dataclasses.replace(architecture, patch_size=file_patch)  # whatever model_name says
  try:
    size = checkpoint.image_size(vit.VisionTransformer(num_classes=1, **as_saved.as_kwargs()))
  except ValueError:
    raise _not_square(path) from None
  if patch_size == file_patch:
    return checkpoint, size
  if architecture.resnet_stages is not None:
    raise CheckpointError(
        f"{path} is a hybrid (ResNet stem + ViT), whose patch size {file_patch} is cut from "
        "the stem's features and cannot be changed: leave patch_size unset")
  flat = dict(checkpoint.flat)
  flat[KERNEL_KEY] = np.asarray(patch_resize.pi_resize_kernel(flat[KERNEL_KEY], patch_size))
  logging.info("PI-resizing the patch embedding %s -> %s", checkpoint.flat[KERNEL_KEY].shape,
               flat[KERNEL_KEY].shape)
  return dataclasses.replace(checkpoint, flat=flat, architecture=dataclasses.replace(
      architecture, patch_size=patch_size)), size


def check_checkpoint(checkpoint: Checkpoint, path: str, model_name: Optional[str] = None
                     ) -> vit.VisionTransformer:
  """The module a checkpoint holds as it is (head and pre_logits included, one class when
  it has no head), after checking every array against it; see check_against."""
  module = vit.VisionTransformer(num_classes=checkpoint.num_classes or 1,
                                 representation_size=checkpoint.representation_size,
                                 **checkpoint.architecture.as_kwargs())
  try:
    size = checkpoint.image_size(module)
  except ValueError:
    raise _not_square(path) from None
  shapes = expected_shapes(module, size)
  if checkpoint.num_classes is None:
    shapes = {k: v for k, v in shapes.items() if not k.startswith("head/")}
  check_against(checkpoint.flat, shapes, path, model_name)
  return module


def load_npz(path: str, *, image_size: Optional[ImageSize] = None,
             num_classes: Optional[int] = None, model_name: Optional[str] = None,
             pre_logits: Optional[bool] = None, allow_nonfinite: bool = False,
             strict_image_size: bool = False, patch_size: Optional[int] = None,
             **model_overrides) -> Tuple[vit.VisionTransformer, Dict[str, Any]]:
  """Loads a released-format .npz as (module, params).

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
  if mixer_npz.holds_mixer(arrays):
    return mixer_npz.load(arrays, path, image_size=image_size, num_classes=num_classes,
                          model_name=model_name, pre_logits=pre_logits,
                          allow_nonfinite=allow_nonfinite, strict_image_size=strict_image_size,
                          patch_size=patch_size, **model_overrides)
  checkpoint = read_checkpoint(path, model_name=model_name, arrays=arrays)
  patch_size = model_overrides.pop("patch_size", patch_size)
  if patch_size is not None and patch_size != checkpoint.flat[KERNEL_KEY].shape[0]:
    checkpoint, file_size = with_patch_size(checkpoint, patch_size, path)
    image_size = file_size if image_size is None else image_size
  if patch_size is not None:
    model_overrides["patch_size"] = patch_size
  flat, architecture = dict(checkpoint.flat), checkpoint.architecture
  file_classes, file_representation = checkpoint.num_classes, checkpoint.representation_size

  keep_head = num_classes is None or num_classes == file_classes
  _check_head_request(checkpoint, path, num_classes, pre_logits)
  keep_pre_logits = keep_head if pre_logits is None else pre_logits
  module = vit.VisionTransformer(
      num_classes=file_classes if num_classes is None else num_classes,
      representation_size=file_representation if keep_pre_logits else None,
      **{**architecture.as_kwargs(), **model_overrides})

  if not keep_pre_logits:
    flat = {k: v for k, v in flat.items() if not k.startswith("pre_logits/")}
  if architecture.classifier == "map" and module.classifier != "map":  # pooled otherwise
    logging.info("%s: its MAP head is left out (classifier=%r)", path, module.classifier)
    flat = {k: v for k, v in flat.items() if not k.startswith(npz_layout.MAP_HEAD + "/")}
  if not keep_head:
    flat = {k: v for k, v in flat.items() if not k.startswith("head/")}
  if not allow_nonfinite:
    check_finite(flat, path)

  if image_size is None:
    try:
      image_size = checkpoint.image_size(module)
    except ValueError:
      raise _not_square(path) from None
  else:
    check_image_size(module, image_size, strict=strict_image_size)
  return module, _params_at(flat, module, image_size, path, model_name,
                            new_head=not keep_head)


def _check_head_request(checkpoint: Checkpoint, path: str, num_classes: Optional[int],
                        pre_logits: Optional[bool]) -> None:
  """Refuses, in one line, a head or pre_logits layer asked of a file that has none to
  give (a two-tower file's head is no classifier)."""
  if checkpoint.two_tower and num_classes is None:
    raise CheckpointError(
        f"{path} is a two-tower (LiT / SigLIP) model: score classes zero-shot with --classes="
        "cat,dog,... (python -m vit_jax.predict or vit_jax.zeroshot), load it with "
        "vit_jax.load_two_tower, or read its image tower's features with num_classes=0")
  if checkpoint.num_classes is None and num_classes is None:
    raise CheckpointError(f"{path} has no head: pass num_classes to add a new one")
  if pre_logits and checkpoint.representation_size is None:
    raise CheckpointError(f"{path} has no pre_logits layer to keep: pass pre_logits=False")


def _params_at(flat: Dict[str, np.ndarray], module: vit.VisionTransformer,
               image_size: ImageSize, path: str, model_name: Optional[str], *,
               new_head: bool) -> Dict[str, Any]:
  """The file's arrays as `module` takes them at `image_size`: a zero-initialised head
  where the file's is replaced, the position embedding resized to the token grid, every
  shape checked; in the module's (scanned or per-block) layout."""
  height, width = side_pair(image_size)
  shapes = expected_shapes(module.clone(scan_layers=False), (height, width))
  if new_head:
    flat["head/kernel"] = np.zeros(shapes["head/kernel"], np.float32)
    flat["head/bias"] = np.full(shapes["head/bias"], module.head_bias_init, np.float32)
  if POSEMB_KEY in shapes and flat[POSEMB_KEY].shape != shapes[POSEMB_KEY]:
    new_grid = (zoo.token_grid(module, height), zoo.token_grid(module, width))
    logging.info("resizing position embedding %s -> %s", flat[POSEMB_KEY].shape,
                 shapes[POSEMB_KEY])
    try:
      flat[POSEMB_KEY] = np.asarray(posemb.resize_posemb(flat[POSEMB_KEY], new_grid,
                                                         module.classifier == "token"))
    except ValueError:
      raise _not_square(path) from None
  check_against(flat, shapes, path, model_name)
  params = traverse_util.unflatten_dict(flat, sep="/")
  return encoder_blocks.to_scan_layout(params) if module.scan_layers else params


IMAGE_SIZE_HELP = ("default: the checkpoint's own. Another size (each side a multiple of the "
                   "model's stride) resizes the position embedding inside the model.")
ALLOW_NONFINITE_HELP = ("Load a checkpoint even if some weights are NaN or Inf (refused by "
                        "default: they make every output NaN).")
