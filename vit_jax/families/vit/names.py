"""The released ViTs by name (the family contract's Names part): names -> architecture
hyper-parameters.

Every model answers to its released name (`ViT-B_16`, `R50+ViT-B_16`) and to its
AugReg short name (`B_16`, `R50_B_16`); lookups ignore case.
"""

import dataclasses
from typing import List, Optional, Tuple

from vit_jax.base import config_checks
from vit_jax.families.vit import model as vit
from vit_jax.models import model_config


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


def released() -> List[str]:
  return list(RELEASED)


def architecture(name: str) -> Architecture:
  return RELEASED[canonical(name)]


def spellings() -> List[str]:
  """Every accepted name: released names first, then the AugReg short names."""
  return list(RELEASED) + [augreg_name(name) for name in RELEASED]


def canonical(name: str) -> Optional[str]:
  """The released name for `name` (also in the paper's notation, `ViT-B/16`), or None."""
  return _BY_LOWER_NAME.get(name.strip().lower().replace("/", "_"))


def find_name(architecture: Architecture) -> Optional[str]:
  """The released name of an architecture (dropout ignored), or None."""
  for name, candidate in RELEASED.items():
    if dataclasses.replace(candidate, dropout_rate=0.0) == dataclasses.replace(
        architecture, dropout_rate=0.0):
      return name
  return None


def architecture_of(module: vit.VisionTransformer) -> Architecture:
  """The Architecture a module was built with (its dropout included)."""
  return Architecture(**{f.name: getattr(module, f.name)
                         for f in dataclasses.fields(Architecture)})


def name_of(module: vit.VisionTransformer) -> str:
  """The released name of a module's sizes, with its pooling and position-embedding
  variants, or the sizes themselves."""
  arch = dataclasses.replace(architecture_of(module), classifier="token", posemb="learn")
  name = find_name(arch) or (
      f"ViT(patch={arch.patch_size}, width={arch.hidden_size}, depth={arch.num_layers}"
      f"{', hybrid' if arch.resnet_stages is not None else ''})")
  variants = [v for v, on in (("gap", module.classifier == "gap"),
                              ("MAP head", module.classifier == "map"),
                              ("sincos2d", module.posemb == "sincos2d")) if on]
  return f"{name} ({', '.join(variants)})" if variants else name


_MODEL_FIELDS = tuple(f.name for f in dataclasses.fields(vit.VisionTransformer)
                      if f.name not in ("parent", "name"))


def create(name: str, *, num_classes: int, **overrides) -> vit.VisionTransformer:
  """A VisionTransformer for a released ViT name; `overrides` replace any attribute (e.g.
  `representation_size=768`, `dropout_rate=0.1`, `dtype=jnp.bfloat16`, `classifier='gap'`)."""
  kwargs = RELEASED[canonical(name)].as_kwargs()
  unknown = sorted(set(overrides) - set(_MODEL_FIELDS))
  if unknown:
    raise TypeError(f"unknown model option(s) {', '.join(unknown)}; "
                    f"valid options: {', '.join(_MODEL_FIELDS)}")
  kwargs.update(overrides)
  config_checks.check_model_options(num_classes, kwargs)
  return vit.VisionTransformer(num_classes=num_classes, **kwargs)


def from_config(config, num_classes: int) -> vit.VisionTransformer:
  """The ViT a training config builds from scratch (config.model_name, config.model.*)."""
  return create(config.model_name, num_classes=num_classes,
                representation_size=config.model.representation_size,
                **model_config.config_overrides(config))
