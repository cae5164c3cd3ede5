"""A toy model family defined from inside tests/ through the public contract alone
(vit_jax.models.family_contract): a two-layer MLP over patches, `Toy-2`. test_toy_family.py
registers FAMILY for its tests (family_registry.register) and shows the house needs nothing
else to train it, save and reload its file, predict with it and plan it."""

import dataclasses
from typing import Any, Dict, Mapping, Optional, Tuple

import flax.linen as nn
import jax.numpy as jnp
import numpy as np
from flax import traverse_util

from vit_jax.base import errors
from vit_jax.checkpoints import npz_checks
from vit_jax.models import family_contract

NAME = "Toy-2"
EMBED = "toy_patches"  # the first layer's name: what tells the family's files and params


@dataclasses.dataclass(frozen=True)
class ToyArchitecture:
  patch_size: int = 4
  hidden: int = 32


class ToyMlp(nn.Module):
  """Patches -> Dense + GELU -> mean over patches -> head (no position: any image size)."""
  num_classes: int
  patch_size: int = 4
  hidden: int = 32
  dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, images, *, train: bool = False, representation: bool = False):
    del train
    p = self.patch_size
    batch, height, width, channels = images.shape
    patches = images[:, :height // p * p, :width // p * p].reshape(
        batch, height // p, p, width // p, p, channels).transpose(0, 1, 3, 2, 4, 5)
    patches = patches.reshape(batch, -1, p * p * channels).astype(self.dtype)
    features = nn.gelu(nn.Dense(self.hidden, dtype=self.dtype, name=EMBED)(patches)).mean(1)
    if representation:
      return features
    return nn.Dense(self.num_classes, dtype=self.dtype, name="head")(features)


class Names:
  """The Names part: one released name."""

  @staticmethod
  def released():
    return [NAME]

  @staticmethod
  def spellings():
    return [NAME]

  @staticmethod
  def canonical(name: str) -> Optional[str]:
    return NAME if str(name).strip().lower() == NAME.lower() else None

  @staticmethod
  def architecture(name: str) -> ToyArchitecture:
    del name
    return ToyArchitecture()

  @staticmethod
  def create(name: str, *, num_classes: int, **overrides) -> ToyMlp:
    del name
    return ToyMlp(num_classes=num_classes, **{k: v for k, v in overrides.items()
                                              if k in ("patch_size", "hidden", "dtype")})

  @staticmethod
  def from_config(config, num_classes: int) -> ToyMlp:
    return Names.create(config.model_name, num_classes=num_classes,
                        dtype=jnp.dtype(config.dtype))

  @staticmethod
  def architecture_of(module: ToyMlp) -> ToyArchitecture:
    return ToyArchitecture(module.patch_size, module.hidden)

  @staticmethod
  def name_of(module: ToyMlp) -> str:
    return NAME if Names.architecture_of(module) == ToyArchitecture() else "a toy MLP"


class ReleasedFile:
  """The ReleasedFile part: the params flattened, '/'-joined, as the file's arrays."""

  @staticmethod
  def recognises(arrays: Mapping[str, Any]) -> bool:
    return f"{EMBED}/kernel" in arrays

  @staticmethod
  def holds(params: Any) -> bool:
    return isinstance(params, Mapping) and EMBED in params

  @staticmethod
  def to_arrays(params: Any) -> Dict[str, np.ndarray]:
    return {k: np.asarray(v) for k, v in traverse_util.flatten_dict(params, sep="/").items()}

  @staticmethod
  def load(arrays, path: str, *, num_classes: Optional[int] = None,
           **options) -> Tuple[ToyMlp, Dict[str, Any]]:
    """Keeps the file's head, or makes a new zero one of num_classes."""
    unknown = sorted(k for k, v in options.items() if v not in (None, False))
    if unknown:
      raise errors.InvalidInput(f"{path}: the toy family takes no {', '.join(unknown)}")
    flat = {k: np.asarray(v, np.float32) for k, v in arrays.items()}
    kernel = flat[f"{EMBED}/kernel"]
    module = ToyMlp(num_classes=num_classes or flat["head/kernel"].shape[-1],
                    patch_size=int(round((kernel.shape[0] / 3) ** 0.5)),
                    hidden=kernel.shape[1])
    if module.num_classes != flat["head/kernel"].shape[-1]:
      flat["head/kernel"] = np.zeros((module.hidden, module.num_classes), np.float32)
      flat["head/bias"] = np.zeros((module.num_classes,), np.float32)
    npz_checks.check_finite(flat, path)
    return module, traverse_util.unflatten_dict(flat, sep="/")

  @staticmethod
  def native_image_size(module, params) -> int:
    del params
    return 8 * module.patch_size  # any size runs; this is the one it is shown at


class Geometry:
  """The Geometry part."""
  resizes_in_forward = True  # no position table: any size

  @staticmethod
  def stride(module) -> int:
    return module.patch_size

  @staticmethod
  def token_grid(module, image_side: int) -> int:
    return image_side // module.patch_size

  @staticmethod
  def flops_per_image(module, image_side: int, patches=None) -> float:
    patches = patches or (image_side // module.patch_size) ** 2
    return 2.0 * patches * module.patch_size**2 * 3 * module.hidden + (
        2.0 * module.hidden * module.num_classes)


TRAINING = family_contract.TrainingRules(
    blocks="toy_blocks",  # it has none: everything is the embedding or the head
    head_side=r"^head(/|$)",
    tensor_rules=((rf"{EMBED}/kernel$", (None, "tensor")), (rf"{EMBED}/bias$", ("tensor",)),
                  (r"head/kernel$", ("tensor", None))),
    tensor_widths=lambda module: ((module.hidden,), f"the toy's {module.hidden} hidden units"),
    resized_on_load="^$",
    to_block_layout=lambda params: params,
    depth_key=None)  # no repeated blocks: a plan prices the step as it is

FAMILY = family_contract.Family(
    name="toy", title="toy MLP", guide="tests/families/toy_family.py",
    words=r"(?i)toy_?mlp|toy-2",
    module_types=(ToyMlp,), names=Names, released_file=ReleasedFile, geometry=Geometry,
    training=TRAINING)
