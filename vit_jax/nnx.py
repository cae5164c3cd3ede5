"""vit_jax for Flax NNX: every model family (the ViT and its hybrids, NaFlex, the MLP-Mixer,
the two towers) as an nnx.Module, through flax's nnx.bridge: the Linen model is the one
definition, the NNX module runs it, and its nnx.Param variables carry the Linen params'
names and values (docs/python_api.md, "From Flax NNX").

  create_model(name, *, num_classes, image_size=224, naflex=False, rngs=0, **overrides)
  load_npz(path, *, naflex=False, rngs=0, **options) -> nnx.Module  (vit_jax.load_npz's options)
  load_two_tower(path, *, bert_heads=None, rngs=0) -> (nnx.Module, TwoTowerInfo)
  from_linen(module, params, *, rngs=0) / to_linen(model) -> (module, params)
  save_npz(model, path, *, class_names=None, allow_nonfinite=False, multi_label=False)
  make_mesh({'data': -1, 'fsdp': 1, 'tensor': 1}); shard(model, mesh) -> model

naflex=True: a MAP-pooled ViT's params run on NaFlex inputs (patches, mask, grid), its
position table at the params' own grid. rngs: a seed or an nnx.Rngs (its `dropout` stream
feeds training's dropout and stochastic depth).
"""

from typing import Any, Optional, Sequence

from vit_jax.base import errors
from vit_jax.checkpoints import npz
from vit_jax.families.two_tower import npz_file as two_tower_npz_file
from vit_jax.families.vit import model as vit_model
from vit_jax.families.vit import naflex_model
from vit_jax.models import family_registry, nnx_bridge
from vit_jax.models.nnx_bridge import from_linen, to_linen  # pylint: disable=unused-import
from vit_jax.training import sharding
from vit_jax.training.nnx_sharding import shard  # pylint: disable=unused-import
from vit_jax.training.sharding import make_mesh  # pylint: disable=unused-import


def create_model(name: str, *, num_classes: int, image_size=224, naflex: bool = False,
                 rngs: nnx_bridge.Rngs = 0, **overrides):
  """The model of a released name (vit_jax.create_model's names and overrides), freshly
  initialised for images of image_size (a Mixer's token mixing is tied to it; a ViT runs
  any size) from rngs' `params` stream."""
  module = family_registry.create_model(name, num_classes=num_classes, **overrides)
  rngs = nnx_bridge.as_rngs(rngs)
  return _bridged(module, nnx_bridge.init_params(module, image_size, rngs), naflex, rngs, name)


def load_npz(path: str, *, naflex: bool = False, rngs: nnx_bridge.Rngs = 0, **options):
  """vit_jax.load_npz's model (a released file, a run's params.npz, a timm or Hugging Face
  file or folder; image_size=, num_classes=, ... as there) as an NNX module."""
  module, params = npz.load_npz(path, **options)
  return _bridged(module, params, naflex, rngs, str(path))


def load_two_tower(path: str, *, bert_heads: Optional[int] = None,
                   rngs: nnx_bridge.Rngs = 0):
  """(model, info) of vit_jax.load_two_tower's file or folder: model(images, tokens) gives
  (zimg, ztxt, logits), model.embed_images / embed_texts / logits each part."""
  module, params, info = two_tower_npz_file.load_two_tower(path, bert_heads=bert_heads)
  return from_linen(module, params, rngs), info


def save_npz(model, path: str, *, class_names: Optional[Sequence[str]] = None,
             allow_nonfinite: bool = False, multi_label: bool = False) -> None:
  """The model's params in its family's released layout, as vit_jax.save_npz writes them:
  predict, export, convert and zeroshot read the file."""
  _, params = to_linen(model)
  npz.save_npz(sharding.to_host(params), path, class_names=class_names,
               allow_nonfinite=allow_nonfinite, multi_label=multi_label)


def _bridged(module, params: Any, naflex: bool, rngs, subject: str):
  if naflex:
    if not isinstance(module, vit_model.VisionTransformer):
      raise errors.InvalidInput(
          f"naflex=True runs a MAP-pooled ViT on NaFlex inputs; {subject} is "
          f"{family_registry.for_module(module).a_title} model: leave naflex out")
    grid = npz.native_image_size(module, params) // module.patch_size
    module = naflex_model.from_vit(module, grid)
  return from_linen(module, params, rngs)


__all__ = ["create_model", "from_linen", "load_npz", "load_two_tower", "make_mesh",
           "save_npz", "shard", "to_linen"]
