"""FlexiViT training (Beyer et al., "FlexiViT: One Model for All Patch Sizes", CVPR 2023):
classification with one set of parameters for every patch size of
`config.model.flexi_patch_sizes` (e.g. (8, 10, 12, 15, 16, 20, 24, 30, 40, 48) at 240 px).

The model stores FlexiViT's underlying parameters: a KERNEL x KERNEL patch-embedding kernel
and a GRID x GRID position-embedding table, PI-resized (vit_jax.models.patch_resize) and
resized (posemb.resize_posemb) to the patch size and grid of the forward pass. Each train
step draws its patch size uniformly from the list: a lax.switch over one branch per size,
indexed by the step's dropout key (so a resumed run draws what the uninterrupted one
drew). With accum_steps > 1 each micro-batch draws its own size. Evaluation runs at every
size (eval/<set>/accuracy_p<P>, loss_p<P>); the plain eval/accuracy is at
`config.model.flexi_export_patch_size` (default: model.patch_size), and params.npz holds the
model at that size in the released layout (kernel PI-resized, table resized to pp.crop /
size): load_npz, the commands and the converters read it as any ViT, and load_npz(...,
patch_size=) moves it to another size.

Keys read: model.flexi_patch_sizes, model.flexi_export_patch_size, model.patch_size,
pp.crop, pretrained (its kernel and table are resized to KERNEL and GRID), and
classification's keys.
"""

import dataclasses
from typing import Any, Dict, Tuple

import jax
import ml_collections

from vit_jax.base import errors
from vit_jax.checkpoints import hub, npz
from vit_jax.families.vit import model as vit
from vit_jax.models import family_registry, model_config, patch_resize, posemb
from vit_jax.training.objectives import classification

KERNEL = 32  # FlexiViT's underlying patch-embedding kernel side
GRID = 7  # and position-embedding grid side (224 px / 32)


def patch_sizes(config: ml_collections.ConfigDict) -> Tuple[int, ...]:
  """config.model.flexi_patch_sizes; () where the config has none (plain training)."""
  return tuple((config.get("model") or {}).get("flexi_patch_sizes", ()) or ())


def export_patch_size(config: ml_collections.ConfigDict) -> int:
  """flexi_export_patch_size, else model.patch_size, else model_name's."""
  return config.model.get("flexi_export_patch_size") or model_config.patch_size(config)


def check(config: ml_collections.ConfigDict) -> None:
  """Sizes that cannot train, refused in one line before anything is read."""
  sizes, crop, export = patch_sizes(config), config.pp.crop, export_patch_size(config)
  where = "config.model.flexi_patch_sizes"
  if any(not isinstance(s, int) or s < 1 for s in sizes) or len(set(sizes)) != len(sizes):
    raise errors.InvalidInput(f"{where}={sizes} must be distinct positive integers, e.g. "
                              "(8, 12, 16)")
  ragged = [s for s in sizes if crop % s]
  if ragged:
    raise errors.InvalidInput(f"{where}: {ragged} do not divide config.pp.crop={crop}: use "
                              f"divisors of {crop}, or another crop")
  if export not in sizes:
    raise errors.InvalidInput(
        f"config.model.flexi_export_patch_size={export} (default model.patch_size) is not in "
        f"{where}={sizes}: params.npz is written at one of the trained sizes")
  if family_registry.architecture(config.model_name).resnet_stages is not None:
    raise errors.InvalidInput(f"FlexiViT needs a plain ViT: {config.model_name} is a hybrid, "
                              "whose patches are cut from the ResNet stem's features")


def underlying(module: vit.VisionTransformer, patch_size: int) -> vit.VisionTransformer:
  """The model with FlexiViT's underlying parameters, running at patch_size."""
  return module.clone(patch_size=patch_size, kernel_size=KERNEL, posemb_grid=(GRID, GRID))


def export(params: Dict[str, Any], patch_size: int, crop: int, has_cls: bool) -> Dict[str, Any]:
  """Underlying params -> the plain ViT's at patch_size for crop px (released layout)."""
  grid = crop // patch_size
  params = dict(params, embedding=dict(params["embedding"], kernel=jax.device_get(
      patch_resize.pi_resize_kernel(params["embedding"]["kernel"], patch_size))))
  table = params["Transformer"].get("posembed_input")
  if table is not None:
    resized = posemb.resize_posemb(table["pos_embedding"], (grid, grid), has_cls, (GRID, GRID))
    params["Transformer"] = dict(params["Transformer"],
                                 posembed_input={"pos_embedding": jax.device_get(resized)})
  return params


@dataclasses.dataclass(frozen=True)
class FlexiClassification:
  """The objective protocol (vit_jax.training.objectives) for FlexiViT; see the module docstring."""
  config: ml_collections.ConfigDict
  name = "classification"
  predicts_classes = True

  def check(self, config: ml_collections.ConfigDict) -> None:
    check(config)

  def create_model(self, config: ml_collections.ConfigDict, num_classes: int, *,
                   load_pretrained: bool):
    """The underlying model at the export size, and a pretrained file's params moved to
    the underlying kernel and grid (PI-resize, table resize) when starting from one."""
    if not load_pretrained:
      module, params = model_config.model_from_config(config, num_classes), None
    else:
      module, params = npz.load_npz(
          hub.resolve(config.pretrained), image_size=GRID * KERNEL, patch_size=KERNEL,
          num_classes=num_classes, model_name=config.model_name,
          pre_logits=config.model.representation_size is not None,
          allow_nonfinite=config.get("allow_nonfinite_pretrained", False),
          **model_config.config_overrides(config))
    return underlying(module, export_patch_size(config)), params

  def make_batch_loss(self, module, config: ml_collections.ConfigDict):
    """The classification loss at a patch size drawn from the step's key."""
    losses = [classification.make_batch_loss(module.clone(patch_size=size), config)
              for size in patch_sizes(config)]

    def batch_loss(params, batch, rng):
      draw, dropout = jax.random.split(rng)
      index = jax.random.randint(draw, (), 0, len(losses))
      return jax.lax.switch(index, losses, params, batch, dropout)

    return batch_loss

  def make_eval_step(self, module, config: ml_collections.ConfigDict):
    """classification's sums at the export size, plus correct_p<P> / loss_sum_p<P> at
    every size (the evaluator reports them as accuracy_p<P> / loss_p<P>)."""
    steps = {size: classification.make_eval_step(module.clone(patch_size=size))
             for size in patch_sizes(config)}
    export_size = export_patch_size(config)

    def eval_step(params, batch):
      sums = {}
      for size, step in steps.items():
        at_size = step(params, batch)
        if size == export_size:
          sums.update(at_size)
        sums[f"correct_p{size}"] = at_size["correct"]
        sums[f"loss_sum_p{size}"] = at_size["loss_sum"]
      return sums

    return eval_step

  def export_params(self, params):
    return export(params, export_patch_size(self.config), self.config.pp.crop,
                  has_cls="cls" in params)
