"""A ViT's conversions for python -m vit_jax.convert (the family contract's Converter part):
our .npz, timm's VisionTransformer (a local-dir: folder, or one .safetensors file) and
transformers' ViTForImageClassification / ViTModel; see
vit_jax.checkpoints.format_conversion for the targets and the pre_logits rules."""

import dataclasses
import os
from typing import Dict, List, Optional, Tuple

import numpy as np
from flax import traverse_util

from vit_jax.base import no_clobber
from vit_jax.checkpoints import format_conversion, formats, npz, torch_layout
from vit_jax.families.vit import geometry, hf_layout, names, npz_file, timm_layout
from vit_jax.families.vit import model as vit
from vit_jax.models import posemb

default_target = None  # a folder DST: --to must say timm or hf


@dataclasses.dataclass
class Source:
  """A checkpoint read for conversion: released-layout arrays and what they are."""
  checkpoint: npz_file.Checkpoint
  module: vit.VisionTransformer
  image_size: Tuple[int, int]

  @property
  def architecture(self) -> names.Architecture:
    return self.checkpoint.architecture

  def summary(self) -> str:
    arch, ckpt = self.architecture, self.checkpoint
    name = names.find_name(arch) or (f"hidden {arch.hidden_size}, {arch.num_layers} layers, "
                                     f"{arch.num_heads} heads, patch {arch.patch_size}")
    posemb = "learned" if arch.posemb == "learn" else "sincos2d"
    parts = [name, f"classifier {arch.classifier}", f"{posemb} position embedding",
             f"{ckpt.num_classes} classes" if ckpt.num_classes else "no head",
             f"pre_logits {ckpt.representation_size}" if ckpt.representation_size else "",
             "x".join(map(str, self.image_size)) + " px"]
    return ", ".join(p for p in parts if p)


def read_source(path: str, model_name: Optional[str] = None,
                image_size: Optional[int] = None, patch_size: Optional[int] = None,
                arrays: Optional[Dict[str, np.ndarray]] = None) -> Source:
  """The checkpoint at `path` (its arrays if already read), for `image_size` px (default:
  the file's own; 224 for sincos2d) and `patch_size` (default: the file's; another is
  PI-resized as load_npz does): a learned position embedding is resized as load_npz
  resizes it."""
  checkpoint = npz_file.read_checkpoint(path, model_name=model_name, arrays=arrays)
  module = npz_file.check_checkpoint(checkpoint, path, model_name)
  native = checkpoint.image_size(module)
  if patch_size is not None:
    checkpoint, native = npz_file.with_patch_size(checkpoint, patch_size, path)
  if image_size is None:
    image_size = native[0]
  if (image_size, image_size) == native and patch_size in (None, module.patch_size):
    return Source(checkpoint, module, native)
  module = module.clone(patch_size=checkpoint.architecture.patch_size)
  npz.check_image_size(module, image_size, strict=True)
  flat = dict(checkpoint.flat)
  if module.posemb == "learn":
    grid = (geometry.token_grid(module, image_size),) * 2
    flat[npz_file.POSEMB_KEY] = np.asarray(posemb.resize_posemb(flat[npz_file.POSEMB_KEY], grid,
                                                                module.classifier == "token"))
  return Source(dataclasses.replace(checkpoint, flat=flat), module, (image_size, image_size))


def _with_table(source: Source) -> Dict[str, np.ndarray]:
  """The arrays, a sincos2d embedding written out as the table it computes."""
  flat = dict(source.checkpoint.flat)
  if source.architecture.posemb == "sincos2d":
    grid = tuple(geometry.token_grid(source.module, side) for side in source.image_size)
    flat[npz_file.POSEMB_KEY] = posemb.sincos_2d_with_cls(
        grid, source.architecture.hidden_size, source.architecture.classifier == "token")
  return flat


def _handle_pre_logits(source: Source, flat: Dict[str, np.ndarray], to: str,
                       pre_logits: Optional[str], src: str) -> Tuple[Dict[str, np.ndarray],
                                                                     Optional[int], List[str]]:
  """(arrays, num_classes, notes) once the pre_logits layer has a faithful place."""
  size, classes = source.checkpoint.representation_size, source.checkpoint.num_classes
  if pre_logits not in (None,) + format_conversion.PRE_LOGITS:
    raise format_conversion.ConversionError(f"unknown pre_logits handling {pre_logits!r}: choose "
                                            f"{' or '.join(format_conversion.PRE_LOGITS)}")
  if not size:
    return flat, classes, []
  if pre_logits is None or (pre_logits == "pooler" and to != "hf"):
    target = "timm's VisionTransformer" if to == "timm" else "ViTForImageClassification"
    raise format_conversion.ConversionError(
        f"{src} has a pre_logits layer (Dense {size} + tanh before the head), which "
        f"{target} does not have: pass --pre_logits=drop to convert the encoder alone as a "
        "feature extractor (without that layer and the head that reads it, as timm does "
        "with the released ImageNet-21k files), or convert with --to=hf "
        "--pre_logits=pooler (transformers' ViTModel pooler is exactly that layer)")
  dropped = ("head/",) if pre_logits == "pooler" else ("head/", "pre_logits/")
  flat = {k: v for k, v in flat.items() if not k.startswith(dropped)}
  note = ("pre_logits became ViTModel's pooler (pooler_output = our representation); the "
          "head was not written" if pre_logits == "pooler" else
          "pre_logits and the head were dropped: the model outputs the pooled features")
  return flat, None, [note]


def write_timm(source: Source, flat: Dict[str, np.ndarray], classes: Optional[int],
               dst: str, class_names: Optional[List[str]] = None) -> List[str]:
  del class_names  # timm's config.json has no place for them
  arch = source.architecture
  try:
    name, args = timm_layout.model_name_and_args(arch, classes, source.image_size)
    if arch.classifier == "token" and not flat[npz_file.POSEMB_KEY][:, 0].any():
      # The class token gets no position embedding (a timm no_embed_class model read
      # earlier, or sincos2d): timm's no_embed_class computes that without the zero row.
      flat = {**flat, npz_file.POSEMB_KEY: flat[npz_file.POSEMB_KEY][:, 1:]}
      args["no_embed_class"] = True
    state = torch_layout.to_torch(flat, timm_layout.rules(arch.resnet_stages == ()), "timm")
  except (timm_layout.Unsupported, torch_layout.LayoutMismatch) as e:
    raise format_conversion.ConversionError(f"no timm model computes this one: {e}") from None
  lines = format_conversion.write_timm_files(state, name, args, source.image_size,
                                             arch.hidden_size, dst)
  if arch.resnet_stages is not None:
    lines.append("note: timm's hybrid stem standardises conv kernels and normalises groups "
                 "with other epsilons than the original code: logits agree to ~1e-4 relative "
                 "(R50+B/16), not to float32 precision")
  return lines


def write_hf(source: Source, flat: Dict[str, np.ndarray], classes: Optional[int],
             dst: str, class_names: Optional[List[str]] = None) -> List[str]:
  rep = source.checkpoint.representation_size if "pre_logits/kernel" in flat else None
  try:
    config = hf_layout.config(source.architecture, classes, rep, source.image_size,
                              class_names)
    backbone = config["architectures"][0] == hf_layout.BACKBONE
    state = torch_layout.to_torch(flat, hf_layout.rules("" if backbone else "vit."),
                                  "transformers' ViT")
  except (hf_layout.Unsupported, torch_layout.LayoutMismatch) as e:
    raise format_conversion.ConversionError(f"no transformers ViT computes this one: {e}") from None
  format_conversion.write_safetensors(state, os.path.join(dst, format_conversion.WEIGHTS))
  format_conversion.write_json(config, os.path.join(dst, formats.CONFIG))
  format_conversion.write_json(hf_layout.preprocessor_config(source.image_size),
                               os.path.join(dst, "preprocessor_config.json"))
  architecture = config["architectures"][0]
  options = {} if rep or not backbone else {"add_pooling_layer": False}  # no pooler weights
  load = format_conversion.call_text(f"transformers.{architecture}.from_pretrained", dst,
                                     **options)
  return [f"wrote transformers {architecture} to {dst}/ ({format_conversion.WEIGHTS}, "
          f"{formats.CONFIG}, preprocessor_config.json)",
          f"load with: {load}"]


def _class_names(src: str, source: Source) -> Optional[List[str]]:
  """The source's class names (an .npz's, or an HF folder's id2label), carried to the
  target with the head they name."""
  if source.checkpoint.num_classes is None:
    return None
  if formats.is_foreign(src):
    config = os.path.join(src, formats.CONFIG)
    names = hf_layout.class_names(formats.read_config(config)) if os.path.isfile(config) else None
  else:
    names = npz.read_class_names(src)
  return names if names is not None and len(names) == source.checkpoint.num_classes else None


def convert(src: str, arrays: Dict[str, np.ndarray], dst: str, to: str, *,
            model_name: Optional[str], image_size: Optional[int], patch_size: Optional[int],
            pre_logits: Optional[str], overwrite: bool) -> List[str]:
  """format_conversion.convert for a ViT's arrays (DST checked and claimed)."""
  source = read_source(src, model_name, image_size, patch_size, arrays)
  lines = [f"read {src}: {source.summary()}"]
  class_names = _class_names(src, source)
  if to == "npz":  # a multi-label head stays one, a NaFlex file NaFlex (only ours record it)
    ours = not formats.is_foreign(src)
    multi_label = class_names is not None and ours and npz.read_multi_label(src)
    npz.save_npz(traverse_util.unflatten_dict(source.checkpoint.flat, sep="/"), dst,
                 class_names=class_names, multi_label=multi_label,
                 max_patches=npz.read_max_patches(src) if ours else None)
    return lines + [f"wrote {dst} (released .npz layout)"]
  if not format_conversion.writes_one_file(dst, to):
    no_clobber.claim_output_dir(dst, format_conversion.KIND, overwrite)
  flat, classes, notes = _handle_pre_logits(source, _with_table(source), to, pre_logits, src)
  if source.architecture.posemb == "sincos2d":
    notes.append("the sincos2d position embedding was written as a table (for "
                 f"{'x'.join(map(str, source.image_size))} px)")
  writer = write_timm if to == "timm" else write_hf
  return lines + writer(source, flat, classes, dst, class_names) + [f"note: {n}" for n in notes]
