"""Released MLP-Mixer .npz files <-> (MlpMixer, params): the family contract's ReleasedFile
part, which vit_jax.checkpoints.npz.load_npz and save_npz ask.

A Mixer file is told apart from a ViT file by its keys (a `stem` conv where a ViT has an
`embedding`); its architecture is read off the shapes, as for a ViT. Another image size
than the file's resizes the token-mixing MLPs (vit_jax.families.mixer.resize) where a rule
exists, and fails in one line where none does, before anything is built.
"""

import dataclasses
import math
from typing import Any, Dict, List, Mapping, Optional, Tuple

import numpy as np
from flax import traverse_util

from vit_jax.checkpoints.npz_checks import (CheckpointError, ImageSize, ImageSizeError,
                                            check_against, check_finite, check_image_size,
                                            expected_shapes, most_common_size, side_pair)
from vit_jax.families.mixer import model as mixer
from vit_jax.families.mixer import resize as mixer_resize
from vit_jax.families.mixer import names
from vit_jax.families.vit import npz_layout
from vit_jax.models import family_registry

STEM = "stem/kernel"
TOKENS = "MixerBlock_0/token_mixing/Dense_0/kernel"
CHANNELS = "MixerBlock_0/channel_mixing/Dense_0/kernel"


def _block_places(blocks: int, mlp: str, keys: Tuple[Tuple[str, int], ...]
                  ) -> List[Tuple[str, int]]:
  return [(f"MixerBlock_{i}/{mlp}/{key}", axis) for i in range(blocks) for key, axis in keys]


def infer(flat: Dict[str, np.ndarray], path: str
          ) -> Tuple[names.MixerArchitecture, Optional[int], int]:
  """(architecture, head classes or None, the file's patch count) from the shapes: each
  width is what most arrays carrying it say, so that an edited or damaged array is the one
  check_against names, not the intact ones that disagree with it."""
  for key in (STEM, TOKENS, CHANNELS):
    if key not in flat:
      raise CheckpointError(f"{path} is not a usable Mixer checkpoint: key {key} is missing "
                            "(the file is damaged or was edited: save it again)")
  stem = flat[STEM]
  if stem.ndim != 4 or stem.shape[0] != stem.shape[1] or 0 in stem.shape:
    raise CheckpointError(f"{path}: {STEM} has shape {stem.shape}, expected a (patch, patch, "
                          "3, hidden) kernel (the file is damaged or was edited: save it again)")
  blocks = len({k.split("/")[0] for k in flat if k.startswith("MixerBlock_")})
  norms = [(f"MixerBlock_{i}/LayerNorm_{j}/{key}", -1) for i in range(blocks)
           for j in (0, 1) for key in ("scale", "bias")]
  hidden = most_common_size(flat, [(STEM, -1), ("pre_head_layer_norm/scale", -1),
                                   ("pre_head_layer_norm/bias", -1), ("head/kernel", 0)]
                            + norms + _block_places(blocks, "channel_mixing", (
                                ("Dense_0/kernel", 0), ("Dense_1/kernel", 1),
                                ("Dense_1/bias", 0))))
  # token_mixing: Dense_0 [patches, D_S], Dense_1 [D_S, patches]; channel_mixing likewise
  mlp_widths = (("Dense_0/kernel", 1), ("Dense_0/bias", 0), ("Dense_1/kernel", 0))
  tokens_mlp = most_common_size(flat, _block_places(blocks, "token_mixing", mlp_widths))
  channels_mlp = most_common_size(flat, _block_places(blocks, "channel_mixing", mlp_widths))
  patches = most_common_size(flat, _block_places(blocks, "token_mixing", (
      ("Dense_0/kernel", 0), ("Dense_1/kernel", 1), ("Dense_1/bias", 0))))
  head = flat.get("head/kernel")
  architecture = names.MixerArchitecture(stem.shape[0], hidden, blocks, tokens_mlp,
                                         channels_mlp)
  return architecture, None if head is None else head.shape[-1], patches


def _check_name(architecture, model_name: Optional[str], overrides: dict, path: str) -> None:
  """A model_name (with the sizes the overrides set) must be the file's Mixer (its
  token-mixing width may be a whole multiple of the name's: a file fine-tuned at a higher
  resolution)."""
  if model_name is None:
    return
  named = family_registry.architecture(model_name)
  if not isinstance(named, names.MixerArchitecture):
    raise CheckpointError(f"{path} holds an MLP-Mixer, not "
                          f"{family_registry.for_model_name(model_name).a_title} "
                          f"({model_name}): {_name_fix(architecture)}{_INFER}")
  named = dataclasses.replace(named, **{k: v for k, v in overrides.items()
                                        if k in named.as_kwargs() and v is not None})
  if (dataclasses.replace(named, tokens_mlp_dim=1) != dataclasses.replace(
      architecture, tokens_mlp_dim=1)) or architecture.tokens_mlp_dim % named.tokens_mlp_dim:
    found = names.find_name(architecture) or "a Mixer of other sizes"
    raise CheckpointError(f"{path} holds {found}, not a "
                          f"{family_registry.canonical_name(model_name)}: "
                          f"{_name_fix(architecture)}{_INFER}")


_INFER = ", or load it without a model_name (load_npz, convert) to infer it from the file"


def _name_fix(held: names.MixerArchitecture) -> str:
  """What to type for a file of these sizes: its released name, or the sizes themselves."""
  name = names.find_name(held)
  if name:
    return f"pass model_name={name} (a run: --config.model_name={name})"
  return "set them: " + " ".join(f"--config.model.{key}={value}"
                                 for key, value in held.as_kwargs().items())


def file_grid(tokens: int, image_size: Optional[ImageSize], patch: int, path: str
              ) -> Tuple[int, int]:
  """The patch grid the file was trained on: square, or the image size's if that has as many
  patches (a non-square file)."""
  if image_size is not None:
    height, width = side_pair(image_size)
    grid = (-(-height // patch), -(-width // patch))
    if grid[0] * grid[1] == tokens:
      return grid
  side = math.isqrt(tokens)
  if side * side != tokens:
    raise CheckpointError(f"{path}: its token-mixing MLPs take {tokens} patches, no square "
                          "grid: pass the image_size (height, width) it was trained at")
  return side, side


def load(arrays: Dict[str, np.ndarray], path: str, *, image_size: Optional[ImageSize] = None,
         num_classes: Optional[int] = None, model_name: Optional[str] = None,
         pre_logits: Optional[bool] = None, allow_nonfinite: bool = False,
         strict_image_size: bool = False, patch_size: Optional[int] = None,
         **overrides) -> Tuple[mixer.MlpMixer, Dict[str, Any]]:
  """load_npz for a Mixer file (same arguments; see there)."""
  npz_layout.check_dtypes(arrays)
  flat = {k: np.asarray(v, np.float32) for k, v in arrays.items()}
  architecture, file_classes, tokens = infer(flat, path)
  _check_name(architecture, model_name, {**overrides, "patch_size": patch_size}, path)
  if pre_logits:
    raise CheckpointError(f"{path} is a Mixer, which has no pre_logits layer: pass "
                          "pre_logits=False (its features are the pooled tokens)")
  patch_size = overrides.pop("patch_size", patch_size)
  for key in architecture.as_kwargs():  # the file's sizes (model_name's, checked above)
    overrides.pop(key, None)
  if patch_size not in (None, architecture.patch_size):
    raise CheckpointError(f"{path} is a Mixer with {architecture.patch_size} px patches; its "
                          "patch size cannot be changed (its token-mixing MLPs are tied to the "
                          "patch grid): leave patch_size unset")
  if file_classes is None and num_classes is None:
    raise CheckpointError(f"{path} has no head: pass num_classes to add a new one")
  for key in (*names.ATTENTION_ONLY, "representation_size"):
    overrides.pop(key, None)
  keep_head = num_classes is None or num_classes == file_classes
  old = file_grid(tokens, image_size, architecture.patch_size, path)
  module = mixer.MlpMixer(num_classes=file_classes if keep_head else num_classes,
                          **{**architecture.as_kwargs(), **overrides})
  height, width = (old[0] * module.patch_size, old[1] * module.patch_size) \
      if image_size is None else side_pair(image_size)
  try:  # the token-mixing MLPs take whole multiples of the file's grid (mixer_resize)
    check_image_size(module, (height, width), strict=strict_image_size, grid_multiple=old)
  except ImageSizeError as e:  # the sizes that work are the file's
    raise ImageSizeError(f"{path}: {e}") from None
  new = (mixer.token_grid(module, height), mixer.token_grid(module, width))
  if new != old:
    factors = mixer_resize.resize_rule(old, new)
    flat = mixer_resize.resize_token_mixing(flat, old, new)
    module = module.clone(tokens_mlp_dim=architecture.tokens_mlp_dim * factors[0] * factors[1])
  if not keep_head:
    flat = {k: v for k, v in flat.items() if not k.startswith("head/")}
  if not allow_nonfinite:
    check_finite(flat, path)
  shapes = expected_shapes(module.clone(scan_layers=False), (height, width))
  if not keep_head and "head/kernel" in shapes:
    flat["head/kernel"] = np.zeros(shapes["head/kernel"], np.float32)
    flat["head/bias"] = np.full(shapes["head/bias"], module.head_bias_init, np.float32)
  check_against(flat, shapes, path, model_name)
  params = traverse_util.unflatten_dict(flat, sep="/")
  return module, mixer.to_scan_layout(params) if module.scan_layers else params


def native_image_size(module: mixer.MlpMixer, params: Dict[str, Any]) -> int:
  """The (square) image side a Mixer's params run at: their token-mixing MLPs' patch count
  times the patch size (per-block or scan-stacked params)."""
  block = params.get("MixerBlock_0") or params[mixer.SCANNED_BLOCKS]
  tokens = block["token_mixing"]["Dense_0"]["kernel"].shape[-2]
  return file_grid(tokens, None, module.patch_size, "the Mixer")[0] * module.patch_size


def recognises(arrays: Mapping[str, Any]) -> bool:
  """A Mixer file has a `stem` conv where a ViT has an `embedding`."""
  return STEM in arrays


def holds(params: Any) -> bool:
  return isinstance(params, Mapping) and mixer.is_mixer_params(params)


def to_arrays(params: Any) -> Dict[str, np.ndarray]:
  """A Mixer's params (per-block or scan_layers) as the released file's flat arrays."""
  return traverse_util.flatten_dict(mixer.to_block_layout(params), sep="/")
