"""config.pretrained checked before anything slow: the main job fetches a released name not
yet in checkpoints/ (an unreachable server fails before the data is read), and plan, which
never loads weights, only checks that a local path is there (a released or hf-hub: name is
fine offline: nothing is downloaded for a plan)."""

import os

from vit_jax.checkpoints import formats, hub, released


def _check_local(pretrained: str, path: str) -> None:
  """A path (not a URL) must be an .npz file or a model folder (config.json)."""
  if not released.has_scheme(path) and not (os.path.isfile(path) or formats.is_foreign(path)):
    kind = ("a directory, not an .npz file or a model folder (with config.json)"
            if os.path.isdir(path) else "not found")
    raise FileNotFoundError(f"config.pretrained={pretrained}: {path} is {kind} (check "
                            "the path, or fetch a released file with python -m vit_jax.download)")


def resolve(config) -> None:
  """Resolves config.pretrained now, downloading a released or hf-hub: name not yet in
  checkpoints/ (loading it later resolves to the same file)."""
  if config.pretrained is None:
    return
  _check_local(config.pretrained, hub.resolve(config.pretrained))


def check_offline(config) -> None:
  """config.pretrained without fetching anything: a released name (of any family) or an
  hf-hub: name passes (an unknown family is one line), a local path must be there."""
  pretrained = config.get("pretrained")
  if pretrained is None or hub.fetcher_of(str(pretrained)) is not None:
    return
  if str(pretrained).startswith(hub.HUB_PREFIX):
    hub.parse_hub_name(str(pretrained))
    return
  _check_local(pretrained, released.resolve(str(pretrained), local_dir=None))
