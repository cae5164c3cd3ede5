"""The model families by name: the one list of built-in families, the families tests or
users register, and the lookups every other module asks instead of naming a family.

A built-in family is imported by its module name the first time a lookup needs the
families (as big_vision imports `big_vision.models.<name>`), so this floor never imports
the families' floor; importing a family's folder registers it."""

import difflib
import importlib
from typing import Any, Dict, List, Mapping, Optional, Tuple

from vit_jax.base import errors
from vit_jax.models.family_contract import Family

# The one list. Order matters only where two families could both recognise something:
# more specific ones first, the plain ViT last.
BUILT_IN = ("vit_jax.families.two_tower", "vit_jax.families.mixer", "vit_jax.families.vit")

_REGISTERED: Dict[str, Family] = {}
_loaded = False


def register(family: Family) -> Family:
  """Adds a family (at import of its folder); a second one of the same name replaces the
  first (a reloaded module). Returns it, so a folder can write FAMILY = register(...)."""
  _REGISTERED[family.name] = family
  return family


def unregister(name: str) -> None:
  """Removes a registered family (a test's own, when the test ends)."""
  _REGISTERED.pop(name, None)


def families() -> List[Family]:
  """Every family: user-registered ones first, then the built-in ones in BUILT_IN order."""
  global _loaded
  if not _loaded:
    for module in BUILT_IN:
      importlib.import_module(module)
    _loaded = True
  built_in = [name.rsplit(".", 1)[1] for name in BUILT_IN]
  return sorted(_REGISTERED.values(),
                key=lambda f: built_in.index(f.name) if f.name in built_in else -1)


def get(name: str) -> Family:
  """The family registered as `name` ('vit', 'mixer', 'two_tower', ...)."""
  found = {family.name: family for family in families()}
  if name not in found:
    raise errors.InvalidInput(f"unknown model family {name!r}; known: {', '.join(found)}")
  return found[name]


def for_model_name(name: str) -> Family:
  """The family a model name (any accepted spelling) belongs to, or one line listing close
  matches among every family's names."""
  if not isinstance(name, str):
    raise errors.InvalidInput(f"model name must be a string such as 'ViT-B_16', got {name!r}")
  for family in families():
    if family.names.canonical(name) is not None:
      return family
  spellings = [spelling for family in families() for spelling in family.names.spellings()]
  close = difflib.get_close_matches(name, spellings, n=4, cutoff=0.5)
  hint = f"did you mean {', '.join(close)}?" if close else "known: " + ", ".join(
      released for family in families() for released in family.names.released())
  raise errors.InvalidInput(f"unknown model name {name!r}; {hint}")


def canonical_name(name: str) -> str:
  """The released name of any accepted spelling (one line for an unknown one)."""
  return for_model_name(name).names.canonical(name)


def architecture(name: str) -> Any:
  """The settings of a released model name (its family's dataclass)."""
  family = for_model_name(name)
  return family.names.architecture(family.names.canonical(name))


def create_model(name: str, *, num_classes: int, **overrides) -> Any:
  """The flax module of a released model name, from whichever family holds the name."""
  family = for_model_name(name)
  return family.names.create(family.names.canonical(name), num_classes=num_classes,
                             **overrides)


def for_module(module) -> Family:
  """The family that builds a flax module (one line for a module no family builds)."""
  for family in families():
    if family.owns(module):
      return family
  raise errors.InvalidInput(f"no model family builds a {type(module).__name__}: register "
                            "one (vit_jax.models.family_registry.register)")


def geometry(module):
  """How a module cuts images into tokens (its family's Geometry), or one line."""
  return for_module(module).part("geometry", type(module).__name__)


def stride(module) -> int:
  """Pixels per token side of a module, whatever its family."""
  return geometry(module).stride(module)


def token_grid(module, image_side: int) -> int:
  """Tokens per side of a module at an input side, whatever its family."""
  return geometry(module).token_grid(module, image_side)


def for_arrays(arrays: Mapping[str, Any]) -> Optional[Family]:
  """The family whose released layout a checkpoint's arrays are in, or None."""
  return next((family for family in families() if family.released_file is not None
               and family.released_file.recognises(arrays)), None)


def for_params(params: Any) -> Optional[Family]:
  """The family a params tree belongs to, or None."""
  return next((family for family in families() if family.released_file is not None
               and family.released_file.holds(params)), None)


def for_layout(state: Mapping[str, Any], config: Mapping[str, Any]
               ) -> Optional[Tuple[Family, str]]:
  """(family, layout name) of a foreign state dict ('timm', 'hf', ...: its config.json
  helps tell), or None."""
  return next(((family, name) for family in families()
               for name, layout in family.layouts.items()
               if layout.recognises(state, config)), None)


def claiming(checkpoint: str) -> Optional[Family]:
  """The family that claims a checkpoint (a name or path) from what it can tell without
  loading it (Family.claims), or None: its arrays, once read, tell (for_arrays)."""
  return next((family for family in families()
               if family.claims is not None and family.claims(str(checkpoint))), None)


def titles_with(part: str) -> str:
  """The titles of the families that have a part ('zero_shot', ...), for messages."""
  return ", ".join(f.title for f in families() if getattr(f, part) is not None)


def with_part(part: str) -> Family:
  """The one family that has a part the caller needs ('pair_training': the contrastive
  objective's models), or one line naming none."""
  found = [f for f in families() if getattr(f, part) is not None]
  if not found:
    raise errors.InvalidInput(f"no registered model family has a {part.replace('_', ' ')} "
                              "part (docs/architecture.md, 'Add a model family')")
  return found[0]
