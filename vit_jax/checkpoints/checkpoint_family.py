"""Which model family a checkpoint given to a command is (a released name, a path or a URL),
before a tool that takes only some families opens it (zeroshot, predict --classes)."""

from vit_jax.checkpoints import hub, npz
from vit_jax.models import family_contract, family_registry


def of(checkpoint: str) -> family_contract.Family:
  """The family that claims the checkpoint from its name or what it can tell without
  loading it (a released name it fetches, a folder's config.json), else that of its
  arrays, read."""
  claimed = family_registry.claiming(checkpoint)
  if claimed is not None:
    return claimed
  return family_registry.for_arrays(npz.read_arrays(hub.resolve(checkpoint)))
