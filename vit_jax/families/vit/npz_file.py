"""A ViT's released .npz layout (the family contract's ReleasedFile part): its arrays
recognised, read into (VisionTransformer, params) at any resolution, patch size and head,
and written back. The original code's files, big_vision's (MAP heads, sincos2d tables, a
two-tower file's image tower) and timm / Hugging Face files once mapped to this layout
(vit_jax.checkpoints.formats) all arrive here as flat arrays."""

import dataclasses
import logging
from typing import Any, Dict, Mapping, Optional, Tuple

import numpy as np
from flax import traverse_util

from vit_jax.base import console
from vit_jax.checkpoints import npz, npz_checks
from vit_jax.checkpoints.npz_checks import (CheckpointError, ImageSize, check_against,
                                            check_finite, check_image_size, expected_shapes,
                                            side_pair)
from vit_jax.families.vit import geometry, names, npz_layout
from vit_jax.families.vit import model as vit
from vit_jax.models import encoder_blocks, family_registry, patch_resize, posemb

POSEMB_KEY = npz_layout.POSEMB
KERNEL_KEY = "embedding/kernel"
# sincos2d models hold no table to read a resolution from: big_vision trains them at 224.
SINCOS_IMAGE_SIZE = 224


def recognises(arrays: Mapping[str, Any]) -> bool:
  """The ViT is the default family: any file no other family claims is read as a ViT's,
  and load names what such a file lacks."""
  del arrays
  return True


def holds(params: Any) -> bool:
  return isinstance(params, Mapping) and "Transformer" in params


def to_arrays(params: Any) -> Dict[str, np.ndarray]:
  """A ViT's params (per-block or scan_layers) as the released file's flat arrays."""
  return npz_layout.to_saved_layout(traverse_util.flatten_dict(
      encoder_blocks.to_block_layout(params), sep="/"))


def _not_square(path: str) -> CheckpointError:
  return CheckpointError(
      f"{path}: {POSEMB_KEY} has no square grid of patch tokens, and only square grids are "
      f"resized or read as an image size: pass the image_size (height, width) it was saved at")


@dataclasses.dataclass(frozen=True)
class Checkpoint:
  """A checkpoint's float32 arrays in the released layout, and what they hold."""
  flat: Dict[str, np.ndarray]
  architecture: names.Architecture
  num_classes: Optional[int]  # None: no head
  representation_size: Optional[int]  # None: no pre_logits layer

  def image_size(self, module: vit.VisionTransformer) -> Tuple[int, int]:
    """The (height, width) the file's position embedding was made for (square grids)."""
    if module.posemb == "sincos2d":
      return SINCOS_IMAGE_SIZE, SINCOS_IMAGE_SIZE
    side = native_image_size(module, {"Transformer": {"posembed_input": {
        "pos_embedding": self.flat[POSEMB_KEY]}}})
    return side, side


def native_image_size(module: vit.VisionTransformer, params: Any) -> int:
  """Input side the params' position embedding was made for (224, 384, ...); for a
  sincos2d model, which works at any size, SINCOS_IMAGE_SIZE."""
  if module.posemb == "sincos2d":
    return SINCOS_IMAGE_SIZE
  num_tokens = params["Transformer"]["posembed_input"]["pos_embedding"].shape[1]
  side = posemb.square_grid_side(num_tokens - (module.classifier == "token"))
  return side * geometry.stride(module)



def read_checkpoint(path: str, *, model_name: Optional[str] = None,
                    arrays: Optional[Dict[str, np.ndarray]] = None) -> Checkpoint:
  """The arrays of any checkpoint load_npz reads, with the architecture they imply.

  model_name: a released name whose sizes the file must have (its pooling and position
  embedding are still the file's: a big_vision MAP or sincos2d B/16 is a ViT-B_16).
  arrays: the file's arrays when already read (npz.read_arrays), else they are read here.
  Raises CheckpointError (one line) for a file that is no ViT checkpoint, naming what it
  holds, or whose arrays fit no layout.
  """
  arrays = npz.read_arrays(path) if arrays is None else arrays
  if npz.LORA_SETTINGS in arrays:
    raise CheckpointError(f"{path} is a LoRA run's adapters file, not a model: pass that "
                          "run's params.npz (the merged model), or rebuild it with python -m "
                          f"vit_jax.lora BASE {path} OUT")
  try:
    flat = npz_layout.to_released_layout(arrays)
    npz_layout.check_dtypes(flat)
    flat = {k: np.asarray(v, np.float32) for k, v in flat.items()}
    architecture, file_classes, file_representation = npz_layout.infer_architecture(flat)
  except KeyError as e:
    other = family_registry.for_arrays(arrays)
    if other is not None and other.name != "vit":
      raise CheckpointError(f"{path} is {other.a_title} checkpoint; this takes ViT checkpoints "
                            f"only ({other.title} files load with load_npz: {other.guide})"
                            ) from None
    raise CheckpointError(f"{path} is not a ViT checkpoint: key {e.args[0]} is missing (the "
                          f"file holds {npz_checks.describe(arrays)})") from None
  except npz_layout.LayoutError as e:
    raise CheckpointError(f"{path} is not a usable ViT checkpoint: {e} (the file is damaged "
                          "or was edited: save it again from the model)") from None
  if architecture.posemb == "sincos2d":
    console.log.info("%s has no position-embedding table: a big_vision posemb='sincos2d' "
                     "model (fixed 2-D sin-cos embeddings, any image size)", path)
  if model_name is not None:
    named = family_registry.for_model_name(model_name)
    if named.names is not names:
      raise CheckpointError(f"{path} holds a ViT, not {named.a_title} ({model_name}): "
                            f"{_name_fix(architecture)}{_INFER}")
    architecture = dataclasses.replace(names.architecture(model_name),
                                       classifier=architecture.classifier,
                                       posemb=architecture.posemb)
  return Checkpoint(flat, architecture, file_classes, file_representation)




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


def load(arrays: Dict[str, np.ndarray], path: str, *, image_size: Optional[ImageSize] = None,
         num_classes: Optional[int] = None, model_name: Optional[str] = None,
         pre_logits: Optional[bool] = None, allow_nonfinite: bool = False,
         strict_image_size: bool = False, patch_size: Optional[int] = None,
         **model_overrides) -> Tuple[vit.VisionTransformer, Dict[str, Any]]:
  """vit_jax.load_npz for a ViT's arrays (the same arguments, see there)."""
  checkpoint = read_checkpoint(path, model_name=model_name, arrays=arrays)
  patch_size = model_overrides.pop("patch_size", patch_size)
  if patch_size is not None and patch_size != checkpoint.flat[KERNEL_KEY].shape[0]:
    checkpoint, file_size = with_patch_size(checkpoint, patch_size, path)
    image_size = file_size if image_size is None else image_size
  if patch_size is not None:
    model_overrides["patch_size"] = patch_size
  flat, architecture = dict(checkpoint.flat), checkpoint.architecture
  file_classes, file_representation = checkpoint.num_classes, checkpoint.representation_size

  if model_name is not None:
    _check_named_sizes(flat, {**architecture.as_kwargs(), **model_overrides}, path, model_name)
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


_SIZES = ("hidden_size", "mlp_dim", "num_heads", "num_layers")


def _check_named_sizes(flat: Dict[str, np.ndarray], built: Dict[str, Any], path: str,
                       model_name: str) -> None:
  """Refuses, in one line that names the file's own model, a model_name (with any size
  overrides) whose sizes are not the file's, before any array is checked: the fix is
  the file's name, or its sizes where it has no released name."""
  held = npz_layout.infer_architecture(flat)[0]
  if all(built[key] == getattr(held, key) for key in _SIZES):
    return
  sizes = ", ".join(f"{key} {getattr(held, key)}" for key in _SIZES)
  overrides = ", ".join(f"{key}={built[key]}" for key in _SIZES
                        if built[key] != getattr(names.architecture(model_name), key))
  asked = model_name + (f" with {overrides}" if overrides else "")
  raise CheckpointError(f"{path} holds a ViT of {sizes}, not a {asked}: {_name_fix(held)}"
                        f"{_INFER}")


_INFER = ", or load it without a model_name (load_npz, convert) to infer it from the file"


def _name_fix(held: names.Architecture) -> str:
  """What to type for a file of these sizes: its released name, or the sizes themselves."""
  name = names.find_name(dataclasses.replace(held, classifier="token", posemb="learn"))
  if name:
    return f"pass model_name={name} (a run: --config.model_name={name})"
  return "set them: " + " ".join(f"--config.model.{key}={getattr(held, key)}" for key in _SIZES)


def _check_head_request(checkpoint: Checkpoint, path: str, num_classes: Optional[int],
                        pre_logits: Optional[bool]) -> None:
  """Refuses, in one line, a head or pre_logits layer asked of a file that has none to
  give (a two-tower file's head is no classifier)."""
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
    new_grid = (geometry.token_grid(module, height), geometry.token_grid(module, width))
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
