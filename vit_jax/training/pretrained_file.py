"""config.pretrained (and a contrastive pair's files) checked before anything slow: the main job fetches a released name not
yet in checkpoints/ (an unreachable server fails before the data is read), and plan, which
never loads weights, only checks that a local path is there (a released or hf-hub: name is
fine offline: nothing is downloaded for a plan). A NaFlex run's params.npz given as
config.pretrained also settles how the run reads images (with_budget)."""

import os
from typing import Optional

from vit_jax.base.console import log
from vit_jax.checkpoints import checkpoint_family, formats, hub, naflex_reading, released


def _check_local(key: str, pretrained: str, path: str) -> None:
  """A path (not a URL) must be an .npz file or a model folder (config.json)."""
  if not released.has_scheme(path) and not (os.path.isfile(path) or formats.is_foreign(path)):
    kind = ("a directory, not an .npz file or a model folder (with config.json)"
            if os.path.isdir(path) else "not found")
    raise FileNotFoundError(f"config.{key}={pretrained}: {path} is {kind} (check "
                            "the path, or fetch a released file with python -m vit_jax.download)")


# The keys naming files a run starts from: the model's, and a contrastive pair's (both
# towers, or its text tower's).
KEYS = ("pretrained", "contrastive.init", "contrastive.text_init")


def _named_files(config):
  """(key, value) of each set KEYS entry."""
  for key in KEYS:
    owner, _, leaf = key.rpartition(".")
    holder = config.get(owner) if owner else config
    value = holder.get(leaf) if holder is not None else None
    if value is not None:
      yield key, value


def resolve(config) -> None:
  """Resolves the files the config starts from now (config.pretrained, a contrastive
  pair's), downloading a released or hf-hub: name not yet in checkpoints/ (loading it
  later resolves to the same file), and refuses a config.pretrained of another family than
  config.model_name's."""
  for key, value in _named_files(config):
    _check_local(key, value, hub.resolve(value))
  checkpoint_family.check_start(config)


def check_offline(config) -> None:
  """The files the config starts from, without fetching anything: a released name (of any
  family) or an hf-hub: name passes (an unknown family is one line), a local path must be
  there."""
  for key, value in _named_files(config):
    if hub.fetcher_of(str(value)) is not None:
      continue
    if str(value).startswith(hub.HUB_PREFIX):
      hub.parse_hub_name(str(value))
      continue
    _check_local(key, value, released.resolve(str(value), local_dir=None))


def recorded_budget(config) -> Optional[int]:
  """The NaFlex patch budget config.pretrained records (a NaFlex run's params.npz), read
  without fetching anything: released and hf-hub: names are other trainers' files, which
  record none."""
  value = config.get("pretrained")
  if value is None or hub.fetcher_of(str(value)) is not None or str(value).startswith(
      hub.HUB_PREFIX):
    return None
  path = released.resolve(str(value), local_dir=None)
  return None if released.is_bucket_url(path) else naflex_reading.recorded_budget(path)


def with_budget(config):
  """The config as the run reads its images, settled once before anything reads
  pp.max_patches (the main job, plan, benchmark): N stays NaFlex at N; 0
  (naflex_reading.SQUARE) asks for square crops and becomes None; None (the default)
  becomes the budget config.pretrained records, so a NaFlex file fine-tunes as NaFlex
  again, and stays None (square crops) for any other file."""
  budget = (config.get("pp") or {}).get("max_patches")
  if budget is not None and budget != naflex_reading.SQUARE or isinstance(budget, bool):
    return config
  recorded = recorded_budget(config)
  if budget is None and recorded is None:
    return config
  reading = naflex_reading.Reading(None if budget == naflex_reading.SQUARE else recorded,
                                   recorded)
  config = config.copy_and_resolve_references()
  with config.unlocked():
    config.pp.max_patches = reading.max_patches
  if recorded is not None:
    log.info("config.pretrained=%s: %s (--config.pp.max_patches=N for another budget, %d "
             "for square crops)", config.pretrained, reading.describe("square crops"),
             naflex_reading.SQUARE)
  return config
