"""An MLP-Mixer's conversions for python -m vit_jax.convert (the family contract's
Converter part): our .npz or timm's MlpMixer; transformers has no Mixer."""

from typing import Dict, List, Optional

import numpy as np
from flax import traverse_util

from vit_jax.base import no_clobber
from vit_jax.checkpoints import format_conversion, formats, npz
from vit_jax.families.mixer import names, npz_file
from vit_jax.families.mixer import timm_layout as mixer_timm_layout
from vit_jax.families.vit import timm_layout

default_target = None  # a folder DST: --to must say timm


def convert(src: str, arrays: Dict[str, np.ndarray], dst: str, to: str, *,
            model_name: Optional[str], image_size: Optional[int], patch_size: Optional[int],
            pre_logits: Optional[str], overwrite: bool) -> List[str]:
  """format_conversion.convert for an MLP-Mixer (its arrays read, dst checked): to our .npz
  or to timm's MlpMixer (transformers has none); image_size resizes the token-mixing MLPs
  as load_npz does (vit_jax.families.mixer.resize)."""
  if to == "hf":
    raise format_conversion.ConversionError(
        f"{src} is an MLP-Mixer, and Hugging Face transformers has no Mixer model: convert "
        "it with --to=timm or to an .npz")
  if pre_logits:
    raise format_conversion.ConversionError(
        f"{src} is an MLP-Mixer, which has no pre_logits layer: leave --pre_logits out")
  module, params = npz_file.load(arrays, src, image_size=image_size, model_name=model_name,
                                 patch_size=patch_size,
                                 num_classes=None if "head/kernel" in arrays else 0)
  side = npz_file.native_image_size(module, params)
  size = (side, side)
  lines = [f"read {src}: {names.find_name(npz_file.infer(arrays, src)[0]) or 'a Mixer'}, "
           f"{module.num_classes or 'no'} classes, {side}x{side} px"]
  if to == "npz":
    class_names = None if formats.is_foreign(src) else npz.read_class_names(src)
    npz.save_npz(params, dst, class_names=class_names if module.num_classes else None)
    return lines + [f"wrote {dst} (released .npz layout)"]
  try:
    name, args = mixer_timm_layout.model_name_and_args(module, size, module.num_classes)
  except timm_layout.Unsupported as e:
    raise format_conversion.ConversionError(f"no timm model computes {src}: {e}") from None
  if not format_conversion.writes_one_file(dst, to):
    no_clobber.claim_output_dir(dst, format_conversion.KIND, overwrite)
  flat = traverse_util.flatten_dict(params, sep="/")
  state = mixer_timm_layout.to_timm({k: np.asarray(v) for k, v in flat.items()})
  return lines + format_conversion.write_timm_files(
      state, name, args, size, module.hidden_dim, dst) + [
      "note: timm's MlpMixer computes the exact GELU unless told otherwise; the original "
      "code (and Google's weights) use the tanh GELU: pass "
      f"{mixer_timm_layout.TANH_GELU_ARGUMENT} to timm.create_model for the same function"]


