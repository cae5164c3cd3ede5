"""The MLP-Mixer sizes (the Mixer paper's Table 1, and the released S/8) by their
released-style names.

`Mixer-B_16` (the original's configs/models.py spelling) also answers to the paper's
`Mixer-B/16` and to timm's `mixer_b16` / `mixer_b16_224`. The family contract's Names part.
"""

import dataclasses
import re
from typing import List, Optional

from vit_jax.base import config_checks, errors
from vit_jax.families.mixer import model as mixer
from vit_jax.models import model_config


@dataclasses.dataclass(frozen=True)
class MixerArchitecture:
  """What distinguishes two Mixers (the original's config names)."""
  patch_size: int
  hidden_dim: int
  num_blocks: int
  tokens_mlp_dim: int
  channels_mlp_dim: int

  def as_kwargs(self) -> dict:
    return dataclasses.asdict(self)


# (hidden_dim C, num_blocks, tokens_mlp_dim D_S, channels_mlp_dim D_C) per size, Table 1.
_SIZES = {"S": (512, 8, 256, 2048), "B": (768, 12, 384, 3072), "L": (1024, 24, 512, 4096),
          "H": (1280, 32, 640, 5120)}
# Table 1's patch sizes, and S/8 (released trained with GSAM: gs://mixer_models/gsam).
_PATCHES = {"S": (32, 16, 8), "B": (32, 16), "L": (32, 16), "H": (14,)}


def _architecture(size: str, patch: int) -> MixerArchitecture:
  hidden, blocks, tokens, channels = _SIZES[size]
  return MixerArchitecture(patch, hidden, blocks, tokens, channels)


RELEASED = {f"Mixer-{size}_{patch}": _architecture(size, patch)
            for size, patches in _PATCHES.items() for patch in patches}

# What a ViT config.model sets that picks an attention kernel: a Mixer has no attention,
# so these are dropped for it (same function either way).
ATTENTION_ONLY = ("attention_impl", "unpadded_inference")
MODEL_FIELDS = tuple(f.name for f in dataclasses.fields(mixer.MlpMixer)
                     if f.name not in ("parent", "name"))


RELEASED_SIDE = 224  # every released Mixer file (gs://mixer_models) was trained at 224 px
_RELEASED_FILE = re.compile(r"^((imagenet1k|imagenet21k|sam|gsam)/)?mixer", re.IGNORECASE)


def width_from_released_file(module: mixer.MlpMixer, pretrained, crop: int) -> mixer.MlpMixer:
  """The module a fine-tune from a released Mixer file (`pretrained` a released name) at
  `crop` px trains: its token-mixing MLPs widened as loading resizes them (one copy per
  224 px window, vit_jax.families.mixer.resize); unchanged for any other start."""
  if not pretrained or not _RELEASED_FILE.match(str(pretrained)):
    return module
  old, new = (mixer.token_grid(module, side) for side in (RELEASED_SIDE, crop))
  if new % old:
    return module  # no rule: loading the file says so
  return module.clone(tokens_mlp_dim=module.tokens_mlp_dim * (new // old) ** 2)


def short_names(name: str) -> List[str]:
  """`Mixer-B_16` -> timm's `mixer_b16` and `mixer_b16_224` (its 224 px models)."""
  size, patch = name[len("Mixer-"):].split("_")
  return [f"mixer_{size.lower()}{patch}", f"mixer_{size.lower()}{patch}_224"]


def released() -> List[str]:
  return list(RELEASED)


def spellings() -> List[str]:
  """Released names first, then timm's."""
  return list(RELEASED) + [short for name in RELEASED for short in short_names(name)]


_BY_LOWER_NAME = {spelling.lower().replace("-", "_"): name for name in RELEASED
                  for spelling in [name] + short_names(name)}


def canonical(name: str) -> Optional[str]:
  """The released name of any spelling (`Mixer-B/16`, `mixer_b16_224`), or None."""
  return _BY_LOWER_NAME.get(name.strip().lower().replace("/", "_").replace("-", "_"))


def architecture(name: str) -> MixerArchitecture:
  return RELEASED[canonical(name)]


def find_name(architecture_: MixerArchitecture) -> Optional[str]:
  return next((name for name, candidate in RELEASED.items() if candidate == architecture_),
              None)


def architecture_of(module: mixer.MlpMixer) -> MixerArchitecture:
  return MixerArchitecture(**{f.name: getattr(module, f.name)
                              for f in dataclasses.fields(MixerArchitecture)})


def name_of(module: mixer.MlpMixer) -> str:
  """The released name of a module's sizes, or the sizes."""
  found = find_name(architecture_of(module))
  return found or (f"Mixer(patch={module.patch_size}, width={module.hidden_dim}, "
                   f"depth={module.num_blocks})")


def from_config(config, num_classes: int) -> mixer.MlpMixer:
  """The Mixer a training config builds (from a released Mixer file: with the token-mixing
  width loading gives it)."""
  module = create(config.model_name, num_classes=num_classes,
                  representation_size=config.model.representation_size,
                  **model_config.config_overrides(config))
  return width_from_released_file(module, config.get("pretrained"), config.pp.crop)


def create(name: str, *, num_classes: int, **overrides) -> mixer.MlpMixer:
  """An MlpMixer for a released Mixer name; overrides replace MlpMixer attributes."""
  config_checks.check_model_options(num_classes, overrides)
  name = canonical(name)
  for key in ATTENTION_ONLY:
    overrides.pop(key, None)
  if overrides.get("patch_size") is None:
    overrides.pop("patch_size", None)
  representation = overrides.pop("representation_size", None)
  if representation is not None:
    raise errors.InvalidInput(f"representation_size={representation}: a Mixer has no "
                              "pre_logits layer (its features are the pooled tokens): leave "
                              "it None")
  unknown = sorted(set(overrides) - set(MODEL_FIELDS))
  if unknown:
    raise TypeError(f"unknown Mixer option(s) {', '.join(unknown)}; "
                    f"valid options: {', '.join(MODEL_FIELDS)}")
  return mixer.MlpMixer(num_classes=num_classes, **{**RELEASED[name].as_kwargs(), **overrides})
