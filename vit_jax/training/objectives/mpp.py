"""Masked patch prediction (MPP): the paper's self-supervised objective (section 4.6,
App. B.1.2), `config.objective = "mpp"`, settings under `config.mpp`.

Corruption, per image (sample_corruption): exactly round(corrupt_rate * N) of its N
patches are corrupted (0.5: half; a fixed count keeps every micro-batch's loss an average
over the same number of patches, so gradient accumulation stays exact). Each corrupted
patch independently gets, with probabilities replace_mask / replace_random / keep
(0.8 / 0.1 / 0.1):
  * the learned [mask] embedding;
  * the embedding of another patch of the same image (uniform over its N - 1 other
    patches). Same image, not the batch: an example's corruption then never reads other
    examples, so the step stays purely data-parallel (no gather across devices) and an
    eval example's numbers do not depend on what it is batched with;
  * its own embedding, unchanged (it must still be predicted).
This acts on the patch embeddings, after the `embedding` conv and before the position
embeddings are added (vit_jax.families.vit.masked_patch_model), so a corrupted patch keeps
its position.

Targets, from the model's input pixels x in [-1, 1] (after the pipeline's resizing,
cropping and flips, so they describe exactly what the model saw), u = (x + 1) / 2 in
[0, 1] (= v / 255 for 8-bit values v):
  * mean_color (the paper's): each RGB channel's mean over the patch, quantised to
    2^color_bits equal bins of [0, 1] (q = min(floor(mean * 2^bits), 2^bits - 1); for 3 bits
    and an 8-bit mean v this is v's top 3 bits), class id (q_r * L + q_g) * L + q_b with
    L = 2^bits: 512 classes at 3 bits. Pure red (255, 0, 0) is class 7 * 64 = 448.
  * downsized_4x4: the patch area-averaged to 4x4 (each cell the mean of a
    (patch/4)^2 block; needs a patch size divisible by 4), each cell's colour quantised
    as above: 16 predictions (row-major cells) of 512 classes.
  * l2_patch: the patch's pixels (patch^2 * 3 values, row-major then RGB) in the model's
    input scale [-1, 1], regressed with the mean squared error over those values.
Classification targets are trained with softmax cross-entropy (averaged over the 16
cells for downsized_4x4).

Evaluation (make_eval_step) follows the eval-step contract of vit_jax.training.objectives: sums
over the corrupted patches of the real (unmasked) rows: `loss_sum`, `correct` (patches
whose target class is predicted; for downsized_4x4 the share of its 16 cells; for
l2_patch whether the predicted patch's 3-bit mean colour is the target's) and
`examples` (the number of corrupted patches), so eval/accuracy is a per-patch accuracy.
The eval corruption is deterministic: drawn from a fixed key folded with a hash of each
example's pixels, so every evaluation of a run corrupts each example the same way,
whatever its batch or position.
"""

import dataclasses
from typing import Any, Dict, Tuple

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax

from vit_jax.base import errors, workdir_files
from vit_jax.base.console import log
from vit_jax.families.vit import masked_patch_model as vit_masked_patch_model
from vit_jax.models import family_registry, model_config


TARGETS = ("mean_color", "downsized_4x4", "l2_patch")
DOWNSIZED_GRID = 4  # downsized_4x4: cells per patch side
EVAL_KEY = 0  # seed of the evaluation corruption
EXPORTED_CLASSES = 1  # params.npz gets a zero head of this many classes


@dataclasses.dataclass(frozen=True)
class Settings:
  """config.mpp, checked (see the module docstring for the meanings)."""
  target: str = "mean_color"
  corrupt_rate: float = 0.5
  replace_mask: float = 0.8
  replace_random: float = 0.1
  keep: float = 0.1
  color_bits: int = 3

  @classmethod
  def from_config(cls, config: ml_collections.ConfigDict) -> "Settings":
    settings = config.get("mpp") or {}
    unknown = sorted(set(settings) - {f.name for f in dataclasses.fields(cls)})
    if unknown:
      raise errors.InvalidInput(
          f"unknown config.mpp key(s) {', '.join(unknown)}; known: "
          f"{', '.join(f.name for f in dataclasses.fields(cls))}")
    return cls(**dict(settings))

  @property
  def fractions(self) -> Tuple[float, float, float]:
    return self.replace_mask, self.replace_random, self.keep

  @property
  def num_colors(self) -> int:
    return 2**(3 * self.color_bits)


def num_corrupted(num_patches: int, rate: float) -> int:
  """Patches corrupted per image: rate * num_patches rounded half up."""
  return int(np.floor(rate * num_patches + 0.5))


# --- Corruption -------------------------------------------------------------------------------


def sample_image_corruption(key: jax.Array, num_patches: int,
                            settings: Settings) -> vit_masked_patch_model.Corruption:
  """One image's corruption ([N] arrays); see the module docstring."""
  order_key, kind_key, source_key = jax.random.split(key, 3)
  count = num_corrupted(num_patches, settings.corrupt_rate)
  chosen = jax.random.permutation(order_key, num_patches)[:count]
  corrupted = jnp.zeros((num_patches,), bool).at[chosen].set(True)
  kind = jax.random.choice(kind_key, 3, (num_patches,), p=jnp.asarray(settings.fractions))
  positions = jnp.arange(num_patches)
  if num_patches > 1:  # uniform over the other positions: skip over one's own
    source = jax.random.randint(source_key, (num_patches,), 0, num_patches - 1)
    source = source + (source >= positions)
  else:
    source = positions
  return vit_masked_patch_model.Corruption(corrupted=corrupted,
                                           replace_mask=corrupted & (kind == 0),
                                           replace_random=corrupted & (kind == 1),
                                           source=source.astype(jnp.int32))


def sample_corruption(keys: jax.Array, num_patches: int,
                      settings: Settings) -> vit_masked_patch_model.Corruption:
  """[B, N] corruption, image i drawn with keys[i]."""
  return jax.vmap(lambda key: sample_image_corruption(key, num_patches, settings))(keys)


def content_hash(images: jax.Array) -> jax.Array:
  """uint32 [B]: a hash of each image's float32 bits, exact (wrapping integer sums do not
  depend on the reduction order)."""
  bits = jax.lax.bitcast_convert_type(images.astype(jnp.float32), jnp.uint32)
  bits = bits.reshape(bits.shape[0], -1)
  weights = (2 * jnp.arange(bits.shape[1], dtype=jnp.uint32) + 1) * jnp.uint32(2654435761)
  return jnp.sum(bits * weights, axis=1, dtype=jnp.uint32)


def eval_keys(images: jax.Array) -> jax.Array:
  base = jax.random.PRNGKey(EVAL_KEY)
  return jax.vmap(lambda h: jax.random.fold_in(base, h))(content_hash(images))


# --- Targets ----------------------------------------------------------------------------------


def patchify(images: jax.Array, patch_size: int) -> jax.Array:
  """[B, H, W, C] -> [B, N, p, p, C], patches in the `embedding` conv's row-major order;
  pixels that fill no whole patch are dropped, as the VALID conv drops them."""
  batch, height, width, channels = images.shape
  rows, cols = height // patch_size, width // patch_size
  x = images[:, :rows * patch_size, :cols * patch_size]
  x = x.reshape(batch, rows, patch_size, cols, patch_size, channels)
  return x.transpose(0, 1, 3, 2, 4, 5).reshape(batch, rows * cols, patch_size, patch_size,
                                               channels)


def to_unit(pixels: jax.Array) -> jax.Array:
  """Model input [-1, 1] -> [0, 1]."""
  return jnp.clip((pixels.astype(jnp.float32) + 1.0) / 2.0, 0.0, 1.0)


def color_class(colors: jax.Array, bits: int) -> jax.Array:
  """[..., 3] RGB in [0, 1] -> int32 class ids [...] in [0, 2^(3 bits))."""
  levels = 2**bits
  q = jnp.clip(jnp.floor(colors * levels), 0, levels - 1).astype(jnp.int32)
  return (q[..., 0] * levels + q[..., 1]) * levels + q[..., 2]


def mean_color_target(images: jax.Array, patch_size: int, bits: int = 3) -> jax.Array:
  """int32 [B, N, 1]: each patch's quantised mean colour."""
  means = jnp.mean(to_unit(patchify(images, patch_size)), axis=(2, 3))
  return color_class(means, bits)[..., None]


def downsized_target(images: jax.Array, patch_size: int, bits: int = 3,
                     grid: int = DOWNSIZED_GRID) -> jax.Array:
  """int32 [B, N, grid^2]: each patch area-averaged to grid x grid, colours quantised."""
  if patch_size % grid:
    raise errors.InvalidInput(f"a {patch_size} px patch does not split into {grid}x{grid} cells")
  patches = to_unit(patchify(images, patch_size))
  batch, num, _, _, channels = patches.shape
  cell = patch_size // grid
  cells = patches.reshape(batch, num, grid, cell, grid, cell, channels).mean(axis=(3, 5))
  return color_class(cells.reshape(batch, num, grid * grid, channels), bits)


def l2_patch_target(images: jax.Array, patch_size: int) -> jax.Array:
  """float32 [B, N, 1, p*p*3]: each patch's pixels in the input scale [-1, 1]."""
  patches = patchify(images.astype(jnp.float32), patch_size)
  return patches.reshape(*patches.shape[:2], 1, -1)


def prediction_shape(settings: Settings, patch_size: int) -> Tuple[int, int]:
  """(predictions per patch, size of each) for the target."""
  if settings.target == "mean_color":
    return 1, settings.num_colors
  if settings.target == "downsized_4x4":
    return DOWNSIZED_GRID**2, settings.num_colors
  return 1, patch_size * patch_size * 3


def patch_losses(predictions: jax.Array, images: jax.Array, patch_size: int,
                 settings: Settings) -> Tuple[jax.Array, jax.Array]:
  """(loss [B, N], correct [B, N] in [0, 1]) of every patch's predictions."""
  if settings.target == "l2_patch":
    target = l2_patch_target(images, patch_size)
    loss = jnp.mean(jnp.square(predictions - target), axis=(2, 3))
    predicted = predictions.reshape(*predictions.shape[:2], patch_size, patch_size, 3)
    predicted_color = color_class(jnp.mean(to_unit(predicted), axis=(2, 3)),
                                  settings.color_bits)
    correct = predicted_color == mean_color_target(images, patch_size,
                                                   settings.color_bits)[..., 0]
    return loss, correct.astype(jnp.float32)
  if settings.target == "mean_color":
    target = mean_color_target(images, patch_size, settings.color_bits)
  else:
    target = downsized_target(images, patch_size, settings.color_bits)
  xent = optax.softmax_cross_entropy_with_integer_labels(predictions, target)
  correct = (jnp.argmax(predictions, axis=-1) == target).astype(jnp.float32)
  return jnp.mean(xent, axis=-1), jnp.mean(correct, axis=-1)


# --- Model, steps, export ---------------------------------------------------------------------


def create_model(config: ml_collections.ConfigDict,
                 overrides: Dict[str, Any]) -> vit_masked_patch_model.MaskedPatchPredictor:
  """config.model_name's architecture with `overrides` (VisionTransformer attributes),
  predicting config.mpp.target."""
  backbone = family_registry.create_model(config.model_name, num_classes=0, **overrides)
  per_patch, size = prediction_shape(Settings.from_config(config), backbone.patch_size)
  return vit_masked_patch_model.from_backbone(backbone, predictions_per_patch=per_patch,
                                              prediction_size=size)


def check_config(config: ml_collections.ConfigDict) -> None:
  """Refuses settings MPP cannot run with, naming the key."""
  settings = Settings.from_config(config)
  if settings.target not in TARGETS:
    raise errors.InvalidInput(
        f"unknown config.mpp.target={settings.target!r}; choose one of "
        f"{', '.join(TARGETS)}")
  if not 0.0 < settings.corrupt_rate <= 1.0:
    raise errors.InvalidInput(
        f"config.mpp.corrupt_rate={settings.corrupt_rate!r} must be in (0, 1] "
        "(the paper: 0.5; BERT's rate 0.15)")
  if min(settings.fractions) < 0 or abs(sum(settings.fractions) - 1.0) > 1e-6:
    raise errors.InvalidInput(
        f"config.mpp.replace_mask, replace_random and keep = {settings.fractions} "
        "must be >= 0 and add up to 1 (the paper: 0.8, 0.1, 0.1)")
  if not 1 <= settings.color_bits <= 8:
    raise errors.InvalidInput(
        f"config.mpp.color_bits={settings.color_bits!r} must be 1..8 (the "
        "paper: 3, 512 colours)")
  if config.model.representation_size is not None:
    raise errors.InvalidInput(
        "config.objective='mpp' has no pre_logits layer: leave "
        "config.model.representation_size None")
  if config.pretrained is not None:
    raise errors.InvalidInput(
        "config.objective='mpp' pre-trains from scratch: set "
        f"config.pretrained=None (fine-tune from the run's {workdir_files.PARAMS} after)")
  architecture = family_registry.architecture(config.model_name)
  patch_size = config.model.get("patch_size", architecture.patch_size)
  if config.model.get("resnet_stages", architecture.resnet_stages) is not None:
    raise errors.InvalidInput(
        f"config.objective='mpp' needs a plain ViT: {config.model_name} is a "
        "hybrid, whose tokens are not image patches")
  if settings.target == "downsized_4x4" and patch_size % DOWNSIZED_GRID:
    raise errors.InvalidInput(
        f"config.mpp.target='downsized_4x4' needs a patch size divisible by "
        f"{DOWNSIZED_GRID}, got {patch_size}")
  num_patches = (config.pp.crop // patch_size)**2
  if num_corrupted(num_patches, settings.corrupt_rate) < 1:
    raise errors.InvalidInput(
        f"config.mpp.corrupt_rate={settings.corrupt_rate} corrupts no patch of "
        f"the {num_patches} an image has: raise it")
  if settings.replace_random > 0 and num_patches < 2:
    raise errors.InvalidInput("config.mpp.replace_random > 0 needs at least 2 patches per image")


def _num_patches(images: jax.Array, patch_size: int) -> int:
  return (images.shape[1] // patch_size) * (images.shape[2] // patch_size)


def make_batch_loss(model: vit_masked_patch_model.MaskedPatchPredictor, settings: Settings):
  """batch_loss(params, batch, rng) -> mean loss over the batch's corrupted patches (a
  fresh corruption from rng; batch['label'] is not read)."""
  def batch_loss(params, batch, rng):
    images = batch["image"]
    corrupt_key, dropout_key = jax.random.split(rng)
    corruption = sample_corruption(jax.random.split(corrupt_key, images.shape[0]),
                                   _num_patches(images, model.patch_size), settings)
    predictions = model.apply({"params": params}, images, train=True, corruption=corruption,
                              rngs={"dropout": dropout_key})
    loss, _ = patch_losses(predictions, images, model.patch_size, settings)
    weight = corruption.corrupted.astype(jnp.float32)
    return jnp.sum(loss * weight) / jnp.sum(weight)

  return batch_loss


def make_eval_step(model: vit_masked_patch_model.MaskedPatchPredictor,
                   config: ml_collections.ConfigDict):
  """eval_step(params, batch) -> {'loss_sum', 'correct', 'examples'} summed over the
  corrupted patches of the rows where batch['mask'] is 1 (deterministic corruption)."""
  settings = Settings.from_config(config)

  def eval_step(params, batch):
    images = batch["image"]
    corruption = sample_corruption(eval_keys(images), _num_patches(images, model.patch_size),
                                   settings)
    predictions = model.apply({"params": params}, images, train=False, corruption=corruption)
    loss, correct = patch_losses(predictions, images, model.patch_size, settings)
    weight = (corruption.corrupted & (batch["mask"] > 0)[:, None]).astype(jnp.float32)
    return {"loss_sum": jnp.sum(loss * weight), "correct": jnp.sum(correct * weight),
            "examples": jnp.sum(weight)}

  return eval_step


def export_backbone(params: Dict[str, Any]) -> Dict[str, Any]:
  """A plain ViT checkpoint from MPP parameters: the [mask] embedding and prediction head
  dropped, a zero head of EXPORTED_CLASSES class added (load_npz(path) then works as for
  a released pre-trained file, and load_npz(path, num_classes=K) replaces it)."""
  backbone = {k: v for k, v in params.items()
              if k not in (vit_masked_patch_model.MASK_EMBEDDING,
                           vit_masked_patch_model.PREDICTION_HEAD)}
  hidden = params["embedding"]["kernel"].shape[-1]
  backbone["head"] = {"kernel": np.zeros((hidden, EXPORTED_CLASSES), np.float32),
                      "bias": np.zeros((EXPORTED_CLASSES,), np.float32)}
  log.info("%s: the MPP backbone, [mask] embedding and prediction head dropped, with a "
           "zero %d-class head (replaced when fine-tuning)", workdir_files.PARAMS, EXPORTED_CLASSES)
  return backbone


class MaskedPatchPrediction:
  """The objective protocol (vit_jax.training.objectives) for MPP: from scratch, no labels."""
  name = "mpp"
  predicts_classes = False

  def check(self, config: ml_collections.ConfigDict) -> None:
    check_config(config)

  def create_model(
      self, config: ml_collections.ConfigDict, num_classes: int, *,
      load_pretrained: bool) -> Tuple[vit_masked_patch_model.MaskedPatchPredictor, None]:
    del num_classes, load_pretrained  # check_config refuses config.pretrained
    return create_model(config, model_config.config_overrides(config)), None

  def make_batch_loss(self, module, config):
    return make_batch_loss(module, Settings.from_config(config))

  def make_eval_step(self, module, config):
    return make_eval_step(module, config)

  def export_params(self, params):
    return export_backbone(params)
