"""Builds hub_mirrors.json, the table of Hugging Face Hub copies of the released bucket
files, from each model family's HubMirrors part (vit_jax.models.family_contract).

  python -m vit_jax.checkpoints.hub_table   # needs timm (the interop extra); rewrites the file

(Where timm's import fails because torchvision's wheel was built for another torch, the
interop tests' declare_missing_torchvision_ops shows the workaround.)

Rows come from timm's own pretrained configs (`get_pretrained_cfg(NAME).url` names the
bucket file a `timm/NAME` repository was converted from; the paper's ImageNet-21k files
are the `orig_in21k` tags, which record no url) and from Google's `google/vit-*`
repositories (transformers' conversions of the paper's files, listed by hand in the ViT
family: no library records them). The test in tests/checkpoints/test_hub_table.py rebuilds the table
with the installed timm and compares. The table also holds, per timm architecture of a
family, what its builder sets beyond sizes: hub.py refuses a `hf-hub:timm/...` model whose
architecture computes something vit_jax does not.
"""

import json
import os
from typing import Any, Dict

from vit_jax.base import storage
from vit_jax.models import family_registry

TABLE = os.path.join(os.path.dirname(__file__), "hub_mirrors.json")
TIMM, HF = "timm", "hf"

SAME = "the same arrays"
NO_HEAD_NO_PRE_LOGITS = "no head, no pre_logits"  # timm dropped both from the 21k files
POOLER = "no head; pre_logits kept"  # as transformers' pooler
# What those differences mean, for listings and errors.
LEGEND = ("no head: the 21,843-class ImageNet-21k head is missing (fine-tuning replaces "
          "it anyway); no pre_logits: the representation layer is missing too, which "
          "--pre_logits and 21k-feature uses need (the google/ copy keeps it)")

ACTIVATIONS = (None, "gelu", "gelu_tanh")  # None and 'gelu': the exact GELU (a warning)


def builder_arguments(timm, module_name: str, factory: str):
  """(model name, the keyword arguments its builder passes to `factory`) for each model of
  timm.models.<module_name>, captured by standing in for the factory: no model is built."""
  module = getattr(timm.models, module_name)

  class Captured(Exception):
    pass

  def capture(variant, pretrained=False, **kwargs):
    raise Captured(kwargs)

  original = getattr(module, factory)
  setattr(module, factory, capture)
  try:
    for name in timm.models.list_models(module=module_name):
      try:
        getattr(module, name)(pretrained=False)
      except Captured as e:
        yield name, e.args[0]
  finally:
    setattr(module, factory, original)


def describe_value(value: Any) -> Any:
  """A builder argument as JSON: classes and functions by name, partials with arguments."""
  if isinstance(value, (str, int, float, bool, type(None))):
    return value
  if isinstance(value, (tuple, list)):
    return [describe_value(v) for v in value]
  func = getattr(value, "func", None)
  if func is not None:  # functools.partial
    args = ", ".join(f"{k}={v!r}" for k, v in value.keywords.items())
    return f"{getattr(func, '__name__', func)}({args})"
  return getattr(value, "__name__", repr(value))


def build(timm) -> Dict[str, Any]:
  """The table from the installed timm: every family's Hub copies and timm architectures."""
  parts = [family.hub_mirrors for family in family_registry.families()
           if family.hub_mirrors is not None]
  mirrors = {}
  for part in parts:
    mirrors.update(part.rows(timm))
  architectures = {}
  for part in parts:
    architectures.update(part.timm_architectures(timm))
  return {"timm_version": timm.__version__, "mirrors": dict(sorted(mirrors.items())),
          "timm_architectures": dict(sorted(architectures.items()))}


def load() -> Dict[str, Any]:
  return json.loads(storage.read_text(TABLE))


def write(table: Dict[str, Any], path: str = TABLE) -> None:
  storage.write_atomic(path, json.dumps(table, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
  import timm as _timm  # pylint: disable=import-outside-toplevel
  write(build(_timm))
  print(TABLE)
