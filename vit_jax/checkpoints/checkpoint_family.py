"""Which model family a checkpoint given to a command is (a released name, a path or a URL),
before a tool that takes only some families opens it (zeroshot, predict --classes), or a
training config starts from it (config.pretrained must give config.model_name's model)."""

import numpy as np

from vit_jax.base import errors, storage
from vit_jax.checkpoints import formats, hub, npz
from vit_jax.models import family_contract, family_registry


def of(checkpoint: str) -> family_contract.Family:
  """The family that claims the checkpoint from its name or what it can tell without
  loading it (a released name it fetches, a folder's config.json), else that of its
  arrays: an .npz's are read only as far as the families' recognises looks (its names)."""
  claimed = family_registry.claiming(checkpoint)
  if claimed is not None:
    return claimed
  path = hub.resolve(checkpoint)
  if not formats.is_foreign(path):
    try:
      with storage.open_read(path) as f, np.load(f, allow_pickle=False) as archive:
        return family_registry.for_arrays(archive)
    except (OSError, ValueError, EOFError):
      pass  # read_arrays names what is wrong with the file
  return family_registry.for_arrays(npz.read_arrays(path))


def check_start(config) -> None:
  """One line when config.pretrained holds another family's model than config.model_name
  builds (its load would fail on the first key the other family lacks, or advise a
  model_name the config does not pass), before any data is read; nothing for a file of the
  right family, or without a file or a model_name."""
  pretrained, model_name = config.get("pretrained"), config.get("model_name")
  if pretrained is None or model_name is None:
    return
  wanted = family_registry.for_model_name(model_name)
  found = of(str(pretrained))
  gives = family_registry.get(found.loads_as) if found.loads_as else found
  if gives.name == wanted.name:
    return
  raise errors.InvalidInput(
      f"config.pretrained={pretrained} is {found.a_title} checkpoint, but config.model_name="
      f"{model_name} trains {wanted.a_title}: start from {wanted.a_title} file"
      f"{_released_start(wanted, model_name)}, or use {gives.a_title} config for this file "
      f"({found.guide})")


def _released_start(family: family_contract.Family, model_name: str) -> str:
  """' (--config.pretrained=NAME)' where the family released a file for the name, else ''."""
  name = family_registry.canonical_name(model_name)
  try:
    if family.bucket is not None and family.bucket.start_file(name):
      return f" (--config.pretrained={name})"
  except errors.InvalidInput:  # no released file of that name
    pass
  return ""
