"""Classification at each image's native aspect ratio (NaFlex, Tschannen et al. 2025),
chosen by `config.pp.max_patches`: the loaders give each image as up to that many patches,
padded to it, with their mask and grid (vit_jax.data.batch_spec), and the model is a
NaFlexViT (vit_jax.families.vit.naflex_model) built from the config's MAP-pooled ViT. Loss,
evaluation and params.npz are classification's: the NaFlexViT's parameters are the ViT's,
name for name.

The position table keeps its own grid and is resized to each image's grid in the step: a
pretrained file's (16 x 16 for the released NaFlex towers, the crop's for a fixed-size
one), or for a model from scratch pp.crop / patch size per side (so params.npz loads as a
ViT at pp.crop too).

params.npz records the budget (vit_jax.checkpoints.naflex_reading), so predict, export,
fewshot and a run that starts from it (config.pretrained with pp.max_patches None:
training/pretrained_file.with_budget) read it as NaFlex at that budget again.

Keys read: pp.max_patches, pp.crop (from scratch), model.*, model_name, pretrained, and
classification's.
"""

from typing import Optional, Tuple

import ml_collections

from vit_jax.base import errors
from vit_jax.checkpoints import hub, npz
from vit_jax.families.vit import naflex_model as vit_naflex_model
from vit_jax.models import family_registry, model_config
from vit_jax.training.objectives import classification


def max_patches(config: ml_collections.ConfigDict) -> Optional[int]:
  """config.pp.max_patches; None where the config has none (square crops)."""
  return (config.get("pp") or {}).get("max_patches")


def loader_patch_size(config: ml_collections.ConfigDict) -> Optional[int]:
  """What the loaders cut each image into (loaders.open_dataset's patch_size): the model's
  patch size with NaFlex, else None (square crops)."""
  return model_config.patch_size(config) if max_patches(config) is not None else None


def from_scratch_grid(config: ml_collections.ConfigDict, patch_size: int) -> int:
  """The position table's side of a model trained from scratch: pp.crop's patch grid."""
  grid = config.pp.crop // patch_size
  if grid < 1:
    raise errors.InvalidInput(
        f"config.pp.crop={config.pp.crop} is below one {patch_size} px patch: NaFlex from "
        "scratch keeps a position table of pp.crop / patch size per side; raise pp.crop")
  return grid


class NaFlexClassification(classification.Classification):
  """Classification's protocol (vit_jax.training.objectives) on NaFlex batches."""

  def check(self, config: ml_collections.ConfigDict) -> None:
    """Classification's checks and a model NaFlex runs (one line naming the config.model
    key to change, or the family's refusal). The budget and MixUp are the loaders'
    (data.datasets, loaders.check)."""
    super().check(config)
    family_registry.for_model_name(config.model_name).refuse(
        "naflex", f"config.model_name={config.model_name}")
    try:
      vit_naflex_model.from_vit(model_config.model_from_config(config, num_classes=1), 1)
    except errors.InvalidInput as e:
      raise errors.InvalidInput(f"config.model: {e} (or --config.pp.max_patches=0 for square "
                                "crops)") from None
    except TypeError:
      pass  # an unknown config.model key: model_config.check_config names it
    if config.get("pretrained") is None:
      from_scratch_grid(config, model_config.patch_size(config))

  def create_model(self, config: ml_collections.ConfigDict, num_classes: int, *,
                   load_pretrained: bool) -> Tuple[vit_naflex_model.NaFlexViT, Optional[dict]]:
    """The NaFlexViT of the config's ViT, plus host params (the file's own table grid)
    when starting from config.pretrained."""
    if not load_pretrained:
      module = model_config.model_from_config(config, num_classes)
      return vit_naflex_model.from_vit(module, from_scratch_grid(config, module.patch_size)), None
    module, params = npz.load_npz(
        hub.resolve(config.pretrained), num_classes=num_classes,
        model_name=config.model_name, pre_logits=config.model.representation_size is not None,
        allow_nonfinite=config.get("allow_nonfinite_pretrained", False),
        **model_config.config_overrides(config))
    grid = npz.native_image_size(module, params) // module.patch_size  # the file's table
    return vit_naflex_model.from_vit(module, grid), params
