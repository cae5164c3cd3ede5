"""The released model zoo: names -> architecture hyper-parameters.

Every model answers to its released name (`ViT-B_16`, `R50+ViT-B_16`) and to its
AugReg short name (`B_16`, `R50_B_16`); lookups ignore case. The MLP-Mixers
(vit_jax.families.mixer.names: `Mixer-B_16`, `mixer_b16`) are looked up and built here too.
"""

import dataclasses
import difflib
from typing import Optional, Tuple

import jax.numpy as jnp

from vit_jax.base import config_checks, errors
from vit_jax.families.mixer import model as mixer
from vit_jax.families.mixer import names as mixer_zoo
from vit_jax.families.vit import hybrid_stem as resnet
from vit_jax.families.vit import model as vit


@dataclasses.dataclass(frozen=True)
class Architecture:
  """What distinguishes two released models; everything else is a training choice."""
  patch_size: int
  hidden_size: int
  mlp_dim: int
  num_heads: int
  num_layers: int
  resnet_stages: Optional[Tuple[int, ...]] = None
  resnet_width: float = 1
  classifier: str = "token"  # token | gap | map (big_vision's attention pooling)
  posemb: str = "learn"  # learn | sincos2d (big_vision's fixed table)
  dropout_rate: float = 0.0  # the reference configs' default for this model

  def as_kwargs(self) -> dict:
    return dataclasses.asdict(self)


_TI = dict(hidden_size=192, mlp_dim=768, num_heads=3, num_layers=12)
_S = dict(hidden_size=384, mlp_dim=1536, num_heads=6, num_layers=12)
_B = dict(hidden_size=768, mlp_dim=3072, num_heads=12, num_layers=12)
_L = dict(hidden_size=1024, mlp_dim=4096, num_heads=16, num_layers=24)
_H = dict(hidden_size=1280, mlp_dim=5120, num_heads=16, num_layers=32)

RELEASED = {
    "ViT-Ti_16": Architecture(patch_size=16, **_TI),
    "ViT-S_16": Architecture(patch_size=16, **_S),
    "ViT-B_16": Architecture(patch_size=16, **_B),
    "ViT-L_16": Architecture(patch_size=16, dropout_rate=0.1, **_L),
    "ViT-H_14": Architecture(patch_size=14, dropout_rate=0.1, **_H),
    "ViT-B_8": Architecture(patch_size=8, **_B),
    "ViT-S_32": Architecture(patch_size=32, **_S),
    "ViT-B_32": Architecture(patch_size=32, **_B),
    "ViT-L_32": Architecture(patch_size=32, **_L),
    "ViT-S_16-gap-norep": Architecture(patch_size=16, classifier="gap", **_S),
    "ViT-B_16-gap-norep": Architecture(patch_size=16, classifier="gap", **_B),
    "R+ViT-Ti_16": Architecture(patch_size=8, resnet_stages=(), **_TI),
    "R26+ViT-S_32": Architecture(patch_size=1, resnet_stages=(2, 2, 2, 2), **_S),
    "R26+ViT-B_32": Architecture(patch_size=1, resnet_stages=(2, 2, 2, 2), **_B),
    "R50+ViT-B_16": Architecture(patch_size=1, resnet_stages=(3, 4, 9), dropout_rate=0.1, **_B),
    "R50+ViT-L_32": Architecture(patch_size=1, resnet_stages=(3, 4, 6, 3), dropout_rate=0.1,
                                 **_L),
}


def augreg_name(released_name: str) -> str:
  """`ViT-B_16` -> `B_16`, `R+ViT-Ti_16` -> `R_Ti_16`, `R26+ViT-S_32` -> `R26_S_32`."""
  return released_name.replace("ViT-", "").replace("+", "_")


_BY_LOWER_NAME = {}
for _name in RELEASED:
  _BY_LOWER_NAME[_name.lower()] = _name
  _BY_LOWER_NAME[augreg_name(_name).lower()] = _name
for _name in mixer_zoo.RELEASED:
  for _short in [_name] + mixer_zoo.short_names(_name):
    _BY_LOWER_NAME[_short.lower().replace("-", "_")] = _name
    _BY_LOWER_NAME[_short.lower()] = _name


def all_names() -> list:
  """Every accepted name: released names first (ViT, then Mixer), then short names."""
  return (list(RELEASED) + list(mixer_zoo.RELEASED) + [augreg_name(name) for name in RELEASED]
          + [short for name in mixer_zoo.RELEASED for short in mixer_zoo.short_names(name)])


def is_mixer(name: str) -> bool:
  """Whether a model name (any accepted spelling) is an MLP-Mixer's."""
  return canonical_name(name) in mixer_zoo.RELEASED


def canonical_name(name: str) -> str:
  """The released name for `name` (also in the paper's notation, `ViT-B/16`), or a
  ValueError listing close matches."""
  if not isinstance(name, str):
    raise errors.InvalidInput(f"model name must be a string such as 'ViT-B_16', got {name!r}")
  found = _BY_LOWER_NAME.get(name.strip().lower().replace("/", "_"))
  if found is None:
    close = difflib.get_close_matches(name, all_names(), n=4, cutoff=0.5)
    hint = f"did you mean {', '.join(close)}?" if close else (
        f"known: {', '.join([*RELEASED, *mixer_zoo.RELEASED])}")
    raise errors.InvalidInput(f"unknown model name {name!r}; {hint}")
  return found


def get_architecture(name: str):
  """The Architecture of a ViT name, or the MixerArchitecture of a Mixer name."""
  name = canonical_name(name)
  return mixer_zoo.RELEASED[name] if name in mixer_zoo.RELEASED else RELEASED[name]


def find_name(architecture: Architecture) -> Optional[str]:
  """The released name of an architecture (dropout ignored), or None."""
  if isinstance(architecture, mixer_zoo.MixerArchitecture):
    return next((name for name, candidate in mixer_zoo.RELEASED.items()
                 if candidate == architecture), None)
  for name, candidate in RELEASED.items():
    if dataclasses.replace(candidate, dropout_rate=0.0) == dataclasses.replace(
        architecture, dropout_rate=0.0):
      return name
  return None


# config.model keys that configure training, not the module (vit_jax.training.objectives.flexi).
NOT_MODULE_KEYS = ("flexi_patch_sizes", "flexi_export_patch_size")
_MODEL_FIELDS = tuple(f.name for f in dataclasses.fields(vit.VisionTransformer)
                      if f.name not in ("parent", "name"))


def create_model(name: str, *, num_classes: int, **overrides) -> vit.VisionTransformer:
  """A VisionTransformer (or an MlpMixer, for a Mixer name) for a released model name.

  `overrides` replace any VisionTransformer attribute (e.g. `representation_size=768`,
  `dropout_rate=0.1`, `dtype=jnp.bfloat16`, `classifier='gap'`), or MlpMixer attribute.
  """
  if is_mixer(name):
    check_options(num_classes, overrides)
    return mixer_zoo.create(canonical_name(name), num_classes=num_classes, **overrides)
  kwargs = get_architecture(name).as_kwargs()
  unknown = sorted(set(overrides) - set(_MODEL_FIELDS))
  if unknown:
    raise TypeError(f"unknown model option(s) {', '.join(unknown)}; "
                    f"valid options: {', '.join(_MODEL_FIELDS)}")
  kwargs.update(overrides)
  check_options(num_classes, kwargs)
  return vit.VisionTransformer(num_classes=num_classes, **kwargs)


def check_options(num_classes, kwargs: dict) -> None:
  """Values that used to fail deep in JAX (num_classes='10') or train on silently without
  learning (dropout_rate=1.5): one line naming the option."""
  if not isinstance(num_classes, int) or isinstance(num_classes, bool) or num_classes < 0:
    raise errors.InvalidInput(f"num_classes={num_classes!r} must be a whole number: the "
                              "size of the classification head (0: a model without one)")
  for key in ("dropout_rate", "attention_dropout_rate"):
    config_checks.check_fraction(key, kwargs.get(key, 0.0), "the share of activations "
                                 "zeroed in training; 0 = off, the paper used 0.1 for L and H")
  config_checks.check_fraction("stochastic_depth", kwargs.get("stochastic_depth", 0.0),
                               "the last block's drop rate in training; 0 = off, AugReg "
                               "used 0.1 (the names' sd_0.1)")


def config_overrides(config) -> dict:
  """The VisionTransformer attributes a training config sets: config.model.* (but the
  representation size, which depends on the checkpoint, and the FlexiViT keys of
  vit_jax.training.objectives.flexi) and the compute dtype."""
  overrides = {k: v for k, v in config.model.items()
               if k not in ("representation_size", *NOT_MODULE_KEYS)
               and not (k == "patch_size" and v is None)}
  return {**overrides, "dtype": jnp.dtype(config.dtype)}


def check_config(config) -> vit.VisionTransformer:
  """The model a training config builds (with a 1-class head), or one line naming the
  config.dtype or config.model value that cannot build it, before any data is read."""
  config_checks.config_choice(config_checks.DTYPES, "dtype", config.dtype)
  try:
    return model_from_config(config, num_classes=1)
  except (TypeError, errors.InvalidInput) as e:  # an unknown or out-of-range config.model.*
    raise errors.InvalidInput(f"config.model: {e}") from None


def model_from_config(config, num_classes: int) -> vit.VisionTransformer:
  """The model a training config builds from scratch (what the main job trains; for a
  Mixer from a released file, with the token-mixing width loading gives it)."""
  module = create_model(config.model_name, num_classes=num_classes,
                        representation_size=config.model.representation_size,
                        **config_overrides(config))
  if isinstance(module, mixer.MlpMixer):
    return mixer_zoo.width_from_released_file(module, config.get("pretrained"),
                                              config.pp.crop)
  return module


def model_stride(module: vit.VisionTransformer) -> int:
  """Pixels per token side: the patch size, times the ResNet stem's stride for hybrids."""
  stride = module.patch_size
  if getattr(module, "resnet_stages", None) is not None:
    stride *= resnet.stem_stride(module.resnet_stages)
  return stride


def token_grid(module: vit.VisionTransformer, image_side: int) -> int:
  """Tokens per side for an input side: SAME stem convs round up, VALID patches down (a
  Mixer's SAME stem rounds up)."""
  if isinstance(module, mixer.MlpMixer):
    return mixer.token_grid(module, image_side)
  if module.resnet_stages is not None:
    halvings = resnet.stem_stride(module.resnet_stages).bit_length() - 1
    for _ in range(halvings):
      image_side = -(-image_side // 2)
  return image_side // module.patch_size


def patch_size(config) -> int:
  """The patch side in pixels of the model a training config builds: config.model.patch_size
  where set, else its model_name's (what a NaFlex loader cuts images into)."""
  return config.model.get("patch_size") or get_architecture(config.model_name).patch_size
