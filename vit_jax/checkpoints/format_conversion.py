"""Checkpoint conversion between our .npz, timm and Hugging Face transformers (numpy and
safetensors only: no PyTorch needed, except to read `.pth`/`.bin` files).

Sources: anything load_npz reads (released and big_vision .npz files, a run's params.npz,
timm and HF `.safetensors`/`.pth`/`.bin` files and model folders). Targets:
  * npz   the released layout (load_npz, --config.pretrained, the original code);
  * timm  a folder that `timm.create_model('local-dir:DST', pretrained=True)` loads
          (config.json with the architecture and the create_model arguments that make timm
          compute our function, model.safetensors), or, for DST ending in .safetensors,
          that file alone (its metadata holds the same config);
  * hf    a folder for transformers' ViTForImageClassification (or ViTModel, see
          pre_logits): config.json, model.safetensors, preprocessor_config.json.
pre_logits (the representation layer, Dense + tanh before the head of the ImageNet-21k
files) has no place in timm's VisionTransformer nor in ViTForImageClassification: such a
file is refused unless pre_logits is 'drop' (convert the encoder as a feature extractor
without that layer and the head that reads it, as timm does with those files) or, for hf,
'pooler' (ViTModel, whose pooler is exactly that layer: its pooler_output is our
representation; the head is not written).
MLP-Mixers (convert_mixer) go to npz or to timm's MlpMixer; transformers has no Mixer.
A sincos2d model becomes a learned table of the same values (neither library has the
fixed embedding); timm and HF outputs are float32.
"""

import dataclasses
import json
import os
from typing import Any, Dict, List, Optional, Tuple

import numpy as np
from flax import traverse_util

from vit_jax.base import errors, no_clobber, storage
from vit_jax.checkpoints import formats, npz, torch_layout
from vit_jax.families.vit import hf_layout
from vit_jax.families.mixer import npz_file as mixer_npz
from vit_jax.families.mixer import timm_layout as mixer_timm
from vit_jax.families.vit import timm_layout
from vit_jax.models import posemb
from vit_jax.families.vit import model as vit
from vit_jax.families.vit import names as zoo

TARGETS = ("npz", "timm", "hf")
PRE_LOGITS = ("drop", "pooler")
WEIGHTS = "model.safetensors"
KIND = "convert"  # the writer's name in the no-clobber markers (vit_jax.base.no_clobber)
NORMALIZE = dict(mean=[0.5, 0.5, 0.5], std=[0.5, 0.5, 0.5])  # (x - 127.5) / 127.5 on [0, 1]


class ConversionError(errors.InvalidInput):
  """A conversion that would not be faithful, or a usage mistake; one line."""


@dataclasses.dataclass
class Source:
  """A checkpoint read for conversion: released-layout arrays and what they are."""
  checkpoint: npz.Checkpoint
  module: vit.VisionTransformer
  image_size: Tuple[int, int]

  @property
  def architecture(self) -> zoo.Architecture:
    return self.checkpoint.architecture

  def summary(self) -> str:
    arch, ckpt = self.architecture, self.checkpoint
    name = zoo.find_name(arch) or (f"hidden {arch.hidden_size}, {arch.num_layers} layers, "
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
  checkpoint = npz.read_checkpoint(path, model_name=model_name, arrays=arrays)
  module = npz.check_checkpoint(checkpoint, path, model_name)
  native = checkpoint.image_size(module)
  if patch_size is not None:
    checkpoint, native = npz.with_patch_size(checkpoint, patch_size, path)
  if image_size is None:
    image_size = native[0]
  if (image_size, image_size) == native and patch_size in (None, module.patch_size):
    return Source(checkpoint, module, native)
  module = module.clone(patch_size=checkpoint.architecture.patch_size)
  npz.check_image_size(module, image_size, strict=True)
  flat = dict(checkpoint.flat)
  if module.posemb == "learn":
    grid = (zoo.token_grid(module, image_size),) * 2
    flat[npz.POSEMB_KEY] = np.asarray(posemb.resize_posemb(flat[npz.POSEMB_KEY], grid,
                                                           module.classifier == "token"))
  return Source(dataclasses.replace(checkpoint, flat=flat), module, (image_size, image_size))


FILE_SUFFIXES = (".npz", formats.SAFETENSORS, ".pth", ".pt", ".bin")


def target_of(dst: str, to: Optional[str]) -> str:
  """The target format: `to`, or DST's suffix (any case); DST checked to fit it."""
  name = dst.lower()
  if to is None:
    if name.endswith(".npz"):
      to = "npz"
    elif name.endswith(formats.SAFETENSORS):
      to = "timm"
    else:
      raise ConversionError(f"cannot tell the target format from {dst}: pass --to="
                            f"{'|'.join(TARGETS)} (npz from a .npz name, timm from "
                            ".safetensors)")
  if to not in TARGETS:
    raise ConversionError(f"unknown target {to!r}: choose one of {', '.join(TARGETS)}")
  is_file = writes_one_file(dst, to)
  if is_file and os.path.isdir(dst):
    raise ConversionError(f"{dst} is a directory and --to={to} writes one file: name the file")
  if not is_file and (os.path.isfile(dst) or name.endswith(FILE_SUFFIXES)):
    raise ConversionError(
        f"--to={to} writes a model folder, and {dst} is "
        f"{'a file' if os.path.isfile(dst) else 'a file name'}: name a folder"
        + (" (or a .safetensors file for timm's weights alone)" if to == "timm" else ""))
  return to


def writes_one_file(dst: str, to: str) -> bool:
  """Whether target `to` at `dst` is one file (npz, timm's .safetensors) or a folder."""
  return to == "npz" or (to == "timm" and dst.lower().endswith(formats.SAFETENSORS))


def _with_table(source: Source) -> Dict[str, np.ndarray]:
  """The arrays, a sincos2d embedding written out as the table it computes."""
  flat = dict(source.checkpoint.flat)
  if source.architecture.posemb == "sincos2d":
    grid = tuple(zoo.token_grid(source.module, side) for side in source.image_size)
    flat[npz.POSEMB_KEY] = posemb.sincos_2d_with_cls(
        grid, source.architecture.hidden_size, source.architecture.classifier == "token")
  return flat


def _handle_pre_logits(source: Source, flat: Dict[str, np.ndarray], to: str,
                       pre_logits: Optional[str], src: str) -> Tuple[Dict[str, np.ndarray],
                                                                     Optional[int], List[str]]:
  """(arrays, num_classes, notes) once the pre_logits layer has a faithful place."""
  size, classes = source.checkpoint.representation_size, source.checkpoint.num_classes
  if pre_logits not in (None,) + PRE_LOGITS:
    raise ConversionError(f"unknown pre_logits handling {pre_logits!r}: choose "
                          f"{' or '.join(PRE_LOGITS)}")
  if not size:
    return flat, classes, []
  if pre_logits is None or (pre_logits == "pooler" and to != "hf"):
    target = "timm's VisionTransformer" if to == "timm" else "ViTForImageClassification"
    raise ConversionError(
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


def _write_json(value: Any, path: str) -> None:
  storage.write_atomic(path, json.dumps(value, indent=2, sort_keys=True) + "\n")


def write_safetensors(state: Dict[str, np.ndarray], path: str,
                      metadata: Optional[Dict[str, str]] = None) -> None:
  from safetensors.numpy import save  # pylint: disable=import-outside-toplevel
  arrays = {k: np.ascontiguousarray(v, np.float32) for k, v in sorted(state.items())}
  storage.write_atomic(path, save(arrays, metadata={"format": "pt", **(metadata or {})}))


def _call(function: str, *args, **kwargs) -> str:
  parts = [repr(a) for a in args] + [f"{k}={v!r}" for k, v in kwargs.items()]
  return f"{function}({', '.join(parts)})"


def write_timm(source: Source, flat: Dict[str, np.ndarray], classes: Optional[int],
               dst: str, class_names: Optional[List[str]] = None) -> List[str]:
  del class_names  # timm's config.json has no place for them
  arch = source.architecture
  try:
    name, args = timm_layout.model_name_and_args(arch, classes, source.image_size)
    if arch.classifier == "token" and not flat[npz.POSEMB_KEY][:, 0].any():
      # The class token gets no position embedding (a timm no_embed_class model read
      # earlier, or sincos2d): timm's no_embed_class computes that without the zero row.
      flat = {**flat, npz.POSEMB_KEY: flat[npz.POSEMB_KEY][:, 1:]}
      args["no_embed_class"] = True
    state = torch_layout.to_torch(flat, timm_layout.rules(arch.resnet_stages == ()), "timm")
  except (timm_layout.Unsupported, torch_layout.LayoutMismatch) as e:
    raise ConversionError(f"no timm model computes this one: {e}") from None
  lines = _write_timm_files(state, name, args, source.image_size, arch.hidden_size, dst)
  if arch.resnet_stages is not None:
    lines.append("note: timm's hybrid stem standardises conv kernels and normalises groups "
                 "with other epsilons than the original code: logits agree to ~1e-4 relative "
                 "(R50+B/16), not to float32 precision")
  return lines


def _write_timm_files(state: Dict[str, np.ndarray], name: str, args: Dict[str, Any],
                      image_size: Tuple[int, int], num_features: int, dst: str) -> List[str]:
  """timm's weights and config (a folder for local-dir:, or one .safetensors file with the
  config in its metadata); the lines that say how to load them."""
  # timm keeps a pretrained head only if the pretrained config has the model's class count.
  pretrained_cfg = {"num_classes": args["num_classes"], "input_size": [3, *image_size],
                    "interpolation": "bilinear", "crop_pct": 1.0, **NORMALIZE}
  config = {"architecture": name, "model_args": args}
  if dst.lower().endswith(formats.SAFETENSORS):
    write_safetensors(state, dst, {formats.TIMM_METADATA: json.dumps(config)})
    loads = _call("timm.create_model", name, pretrained=True,
                  pretrained_cfg_overlay=dict(file=dst, **pretrained_cfg), **args)
    return [f"wrote timm {name} weights to {dst}", f"load with: {loads}"]
  write_safetensors(state, os.path.join(dst, WEIGHTS))
  _write_json({**config, "num_classes": args["num_classes"], "num_features": num_features,
               "global_pool": args.get("global_pool", "avg"), "pretrained_cfg": {
                   **pretrained_cfg, "crop_mode": "center", "fixed_input_size": True,
                   "classifier": "head"}},
              os.path.join(dst, formats.CONFIG))
  return [f"wrote timm {name} to {dst}/ ({WEIGHTS}, {formats.CONFIG})",
          f"load with: timm.create_model('local-dir:{dst}', pretrained=True)",
          f"which is: {_call('timm.create_model', name, **args)} + these weights"]


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
    raise ConversionError(f"no transformers ViT computes this one: {e}") from None
  write_safetensors(state, os.path.join(dst, WEIGHTS))
  _write_json(config, os.path.join(dst, formats.CONFIG))
  _write_json(hf_layout.preprocessor_config(source.image_size),
              os.path.join(dst, "preprocessor_config.json"))
  architecture = config["architectures"][0]
  options = {} if rep or not backbone else {"add_pooling_layer": False}  # no pooler weights
  return [f"wrote transformers {architecture} to {dst}/ ({WEIGHTS}, {formats.CONFIG}, "
          "preprocessor_config.json)",
          f"load with: {_call(f'transformers.{architecture}.from_pretrained', dst, **options)}"]


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


def convert_mixer(src: str, arrays: Dict[str, np.ndarray], dst: str, to: str, *,
                  model_name: Optional[str], image_size: Optional[int],
                  patch_size: Optional[int], pre_logits: Optional[str],
                  overwrite: bool) -> List[str]:
  """convert() for an MLP-Mixer (its arrays read, dst checked): to our .npz or to timm's
  MlpMixer (transformers has none); image_size resizes the token-mixing MLPs as load_npz
  does (vit_jax.families.mixer.resize)."""
  if to == "hf":
    raise ConversionError(f"{src} is an MLP-Mixer, and Hugging Face transformers has no "
                          "Mixer model: convert it with --to=timm or to an .npz")
  if pre_logits:
    raise ConversionError(f"{src} is an MLP-Mixer, which has no pre_logits layer: leave "
                          "--pre_logits out")
  module, params = mixer_npz.load(arrays, src, image_size=image_size, model_name=model_name,
                                  patch_size=patch_size,
                                  num_classes=None if "head/kernel" in arrays else 0)
  size = mixer_npz.native_image_size(module, params)
  lines = [f"read {src}: {zoo.find_name(mixer_npz.infer(arrays, src)[0]) or 'a Mixer'}, "
           f"{module.num_classes or 'no'} classes, {size[0]}x{size[1]} px"]
  if to == "npz":
    names = None if formats.is_foreign(src) else npz.read_class_names(src)
    npz.save_npz(params, dst, class_names=names if module.num_classes else None)
    return lines + [f"wrote {dst} (released .npz layout)"]
  try:
    name, args = mixer_timm.model_name_and_args(module, size, module.num_classes)
  except timm_layout.Unsupported as e:
    raise ConversionError(f"no timm model computes {src}: {e}") from None
  if not writes_one_file(dst, to):
    no_clobber.claim_output_dir(dst, KIND, overwrite)
  flat = traverse_util.flatten_dict(params, sep="/")
  state = mixer_timm.to_timm({k: np.asarray(v) for k, v in flat.items()})
  return lines + _write_timm_files(state, name, args, size, module.hidden_dim, dst) + [
      "note: timm's MlpMixer computes the exact GELU unless told otherwise; the original "
      "code (and Google's weights) use the tanh GELU: pass "
      f"{mixer_timm.TANH_GELU_ARGUMENT} to timm.create_model for the same function"]


def convert(src: str, dst: str, *, to: Optional[str] = None, model_name: Optional[str] = None,
            pre_logits: Optional[str] = None, image_size: Optional[int] = None,
            patch_size: Optional[int] = None, overwrite: bool = False) -> List[str]:
  """Converts checkpoint src to dst (see the module docstring); returns the lines that
  say what was read and written and how to load it. image_size: the input side of the
  written model (default: the source's; 224 for sincos2d), its position embedding
  resized (align-corners bilinear, as for fine-tuning) or, for sincos2d, computed for it.
  patch_size: the written model's (default: the source's), its kernel PI-resized (FlexiViT).
  dst must be new, or an earlier conversion's output, unless overwrite (see
  vit_jax.base.no_clobber: a run's workdir or someone's model folder is never clobbered).

  Raises ConversionError, npz.CheckpointError or no_clobber.OutputExistsError (one line) for
  what cannot be converted faithfully, read at all, or written without clobbering.
  """
  to = target_of(os.fspath(dst), to)
  src, dst = os.fspath(src), os.fspath(dst)
  with no_clobber.sole_writer(dst, KIND):  # a concurrent conversion into dst fails here
    one_file = writes_one_file(dst, to)
    if one_file:
      no_clobber.claim_output_file(dst, KIND, overwrite)
    else:
      no_clobber.check_output_dir(dst, KIND, overwrite)
    arrays = npz.read_arrays(src)
    if mixer_npz.holds_mixer(arrays):
      return convert_mixer(src, arrays, dst, to, model_name=model_name, image_size=image_size,
                           patch_size=patch_size, pre_logits=pre_logits, overwrite=overwrite)
    source = read_source(src, model_name, image_size, patch_size, arrays)
    lines = [f"read {src}: {source.summary()}"]
    names = _class_names(src, source)
    if to == "npz":  # a multi-label head stays one (only our .npz files record it)
      multi_label = (names is not None and not formats.is_foreign(src)
                     and npz.read_multi_label(src))
      npz.save_npz(traverse_util.unflatten_dict(source.checkpoint.flat, sep="/"), dst,
                   class_names=names, multi_label=multi_label)
      return lines + [f"wrote {dst} (released .npz layout)"]
    if not one_file:
      no_clobber.claim_output_dir(dst, KIND, overwrite)
    flat, classes, notes = _handle_pre_logits(source, _with_table(source), to, pre_logits, src)
    if source.architecture.posemb == "sincos2d":
      notes.append("the sincos2d position embedding was written as a table (for "
                   f"{'x'.join(map(str, source.image_size))} px)")
    writer = write_timm if to == "timm" else write_hf
    return lines + writer(source, flat, classes, dst, names) + [f"note: {n}" for n in notes]
