"""The masked patch prediction model: a ViT backbone under the ViT's own names."""

import jax
import jax.numpy as jnp
import numpy as np
from flax import traverse_util

from conftest import tiny_model
from vit_jax.families.vit import masked_patch_model


def images(batch=2, side=16, seed=0):
  return jax.random.uniform(jax.random.PRNGKey(seed), (batch, side, side, 3), minval=-1, maxval=1)


def flat_shapes(params):
  return {k: v.shape for k, v in traverse_util.flatten_dict(params, sep="/").items()}


def test_backbone_names_and_shapes_are_the_vision_transformers():
  backbone = tiny_model(num_classes=5)
  model = masked_patch_model.from_backbone(backbone, prediction_size=512)
  vit_shapes = flat_shapes(jax.eval_shape(backbone.init, jax.random.PRNGKey(0), images())["params"])
  mpp_shapes = flat_shapes(jax.eval_shape(model.init, jax.random.PRNGKey(0), images())["params"])
  own = {"mask_embedding": (1, 1, 32), "mpp_head/kernel": (32, 512), "mpp_head/bias": (512,)}
  assert {k: v for k, v in mpp_shapes.items() if k not in own} == {
      k: v for k, v in vit_shapes.items() if not k.startswith("head/")}
  assert {k: mpp_shapes[k] for k in own} == own


def test_representation_is_the_backbones_and_predictions_cover_every_patch():
  backbone = tiny_model(num_classes=5)
  model = masked_patch_model.from_backbone(backbone, predictions_per_patch=16, prediction_size=7)
  params = jax.jit(model.init)(jax.random.PRNGKey(0), images())["params"]
  vit_params = {k: v for k, v in params.items() if k not in ("mask_embedding", "mpp_head")}
  vit_params["head"] = {"kernel": jnp.zeros((32, 5)), "bias": jnp.zeros(5)}
  np.testing.assert_allclose(
      model.apply({"params": params}, images(), representation=True),
      backbone.apply({"params": vit_params}, images(), representation=True), atol=1e-6)
  assert model.apply({"params": params}, images()).shape == (2, 16, 16, 7)


def test_corruption_comes_before_the_position_embeddings():
  """All patches masked: the output no longer depends on the image, but still on the
  position (position embeddings are added after the [mask] embedding)."""
  model = masked_patch_model.from_backbone(tiny_model(), prediction_size=8)
  params = jax.jit(model.init)(jax.random.PRNGKey(0), images())["params"]
  params["mpp_head"]["kernel"] = jax.random.normal(jax.random.PRNGKey(1), (32, 8))
  everything = jnp.ones((2, 16), bool)
  masked = masked_patch_model.Corruption(
      corrupted=everything, replace_mask=everything, replace_random=~everything,
      source=jnp.zeros((2, 16), jnp.int32))
  out = model.apply({"params": params}, images(), corruption=masked)
  np.testing.assert_allclose(out[0], out[1], atol=1e-5)  # two different images
  assert float(jnp.abs(out[0, 0] - out[0, 5]).max()) > 1e-3  # two positions
  clean = model.apply({"params": params}, images())
  assert float(jnp.abs(clean[0] - clean[1]).max()) > 1e-3
