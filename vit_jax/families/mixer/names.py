"""The MLP-Mixer sizes (the Mixer paper's Table 1, and the released S/8) by their
released-style names.

`Mixer-B_16` (the original's configs/models.py spelling) also answers to the paper's
`Mixer-B/16` and to timm's `mixer_b16` / `mixer_b16_224`; vit_jax.families.vit.names resolves the
names of both families and builds either module.
"""

import dataclasses
import re
from typing import List

from vit_jax.base import errors
from vit_jax.families.mixer import model as mixer


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


def create(name: str, *, num_classes: int, **overrides) -> mixer.MlpMixer:
  """An MlpMixer for a released Mixer name; overrides replace MlpMixer attributes."""
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
