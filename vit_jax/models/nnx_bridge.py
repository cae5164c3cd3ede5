"""A family's Linen module and its params as one Flax NNX module, through flax's own bridge
(nnx.bridge.ToNNX): the model stays defined once, in Linen, and the NNX module runs the
same function (module.apply) on nnx.Param variables named as the Linen params are
(nnx.state(model, nnx.Param) is the params tree, name for name), so the released files
and every tool keep working on what an NNX user trains. What vit_jax.nnx builds on."""

from typing import Any, Tuple, Union

import jax
import jax.numpy as jnp
from flax import nnx

from vit_jax.base import errors, image_sizes
from vit_jax.models import family_registry

Rngs = Union[nnx.Rngs, int]


def as_rngs(rngs: Rngs) -> nnx.Rngs:
  """An nnx.Rngs; a seed gives a `params` stream and a `dropout` stream (training with
  dropout or stochastic depth draws from it) of its own."""
  if isinstance(rngs, nnx.Rngs):
    return rngs
  if not isinstance(rngs, int) or isinstance(rngs, bool):
    raise errors.InvalidInput(f"rngs must be an int seed or an nnx.Rngs, got {rngs!r}: e.g. "
                              "rngs=nnx.Rngs(0, dropout=1)")
  return nnx.Rngs(rngs, dropout=rngs + 1)


def from_linen(module, params: Any, rngs: Rngs = 0) -> nnx.bridge.ToNNX:
  """The NNX module of a Linen module and its params ({'params': ...} or the bare tree):
  each array an nnx.Param at the Linen name, nothing initialised again."""
  if isinstance(params, dict) and set(params) == {"params"}:
    params = params["params"]
  model = nnx.bridge.ToNNX(module, rngs=as_rngs(rngs))
  for name, value in params.items():  # ToNNX's own layout: one attribute per top-level name
    setattr(model, name, jax.tree.map(lambda x: nnx.Param(jnp.asarray(x)), value))
  return model


def to_linen(model) -> Tuple[Any, Any]:
  """(the Linen module, its params as a nested dict of arrays) of a model from_linen made,
  with what training changed in it."""
  if not isinstance(model, nnx.bridge.ToNNX):
    raise errors.InvalidInput(
        f"expected a model that vit_jax.nnx made (its create_model, load_npz, ...), got a "
        f"{type(model).__name__}: wrap a Linen module and its params with "
        "vit_jax.nnx.from_linen(module, params)")
  return model.to_nnx__module, nnx.to_pure_dict(nnx.state(model, nnx.Param))


def init_params(module, image_size: image_sizes.ImageSize, rngs: nnx.Rngs) -> Any:
  """Fresh params of an image model (a classifier any family builds by name) for images of
  image_size, from the `params` stream, initialised as module.init does."""
  height, width = image_sizes.side_pair(image_size)
  stride = family_registry.stride(module)
  if height % stride or width % stride:
    raise image_sizes.ImageSizeError(
        f"image_size={image_size!r} is not a multiple of the model's {stride}-pixel patches: "
        f"use e.g. {max(stride, height // stride * stride)}")
  images = jnp.zeros((1, height, width, 3), jnp.float32)
  return jax.jit(module.init)(rngs.params(), images)["params"]
