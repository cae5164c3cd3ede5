"""The evaluators a config declares: `config.evals.<name> = {'type': KIND, ...its
settings}`, any number of each kind, each named by its key (its metrics carry the name).
A set without 'type' is a classification set, as every config.evals entry was before kinds
had names, so older configs mean what they meant."""

import dataclasses
import re
from typing import Collection, List

import ml_collections

from vit_jax.base import errors

DEFAULT_TYPE = "classification"
_NAME = re.compile(r"^[A-Za-z0-9_-]+$")


@dataclasses.dataclass(frozen=True)
class Instance:
  """One declared evaluator: `name` goes into its metric names, `key` is where the config
  holds its `settings` (for messages: 'evals.<name>')."""
  name: str
  key: str
  settings: ml_collections.ConfigDict


def type_of(settings: ml_collections.ConfigDict) -> str:
  return settings.get("type", DEFAULT_TYPE)


def of_type(config: ml_collections.ConfigDict, kind: str) -> List[Instance]:
  """config.evals' instances of one kind, in name order."""
  return [Instance(name, f"evals.{name}", settings)
          for name, settings in sorted(config.get("evals", {}).items())
          if type_of(settings) == kind]


def check(config: ml_collections.ConfigDict, kinds: Collection[str]) -> None:
  """Names that can be metric names and types that name a kind, refused in one line
  before any kind reads its settings."""
  for name, settings in config.get("evals", {}).items():
    if not _NAME.match(name):
      raise errors.InvalidInput(
          f"config.evals.{name}: set names may hold letters, digits, '_' and '-' only "
          "(they become part of metric names, e.g. eval/<name>/accuracy)")
    kind = type_of(settings)
    if kind not in kinds:
      raise errors.InvalidInput(
          f"config.evals.{name}.type={kind!r} is not an evaluator kind; choose one of "
          f"{', '.join(kinds)}")
