"""The hybrid models' ResNet stem (vit_facts.md section 2)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vit_jax.families.vit import hybrid_stem


@pytest.mark.parametrize("scale", [3.0, 1e-2, 1e-3])
def test_weight_standardisation_uses_population_std_plus_eps(scale):
  """Small scales pin the 1e-5: real checkpoints have convs whose per-channel std is ~1e-2
  and below, where eps moves the standardised kernel by 1e-3 relative (1e-8 would not)."""
  kernel = (jax.random.normal(jax.random.PRNGKey(0), (3, 3, 4, 5)) + 1 / 3) * scale
  out = hybrid_stem.standardize_weight(kernel)
  k = np.asarray(kernel, np.float64)
  centred = k - k.mean(axis=(0, 1, 2))
  expected = centred / (np.sqrt((centred**2).mean(axis=(0, 1, 2))) + 1e-5)
  np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6)


def test_std_conv_stores_the_raw_kernel_and_pads_same():
  conv = hybrid_stem.StdConv(8, (7, 7), (2, 2))
  x = jax.random.normal(jax.random.PRNGKey(0), (1, 16, 16, 3))
  params = conv.init(jax.random.PRNGKey(1), x)
  out = conv.apply(params, x)
  assert out.shape == (1, 8, 8, 8)  # SAME: ceil(16 / 2)
  kernel = hybrid_stem.standardize_weight(params["params"]["kernel"])
  # XLA's SAME for stride 2 pads (2, 3) on a 16-wide input with a 7-wide kernel.
  expected = jax.lax.conv_general_dilated(x, kernel, (2, 2), [(2, 3), (2, 3)],
                                          dimension_numbers=("NHWC", "HWIO", "NHWC"))
  np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)


def test_bottleneck_starts_as_projection_because_gn3_scale_is_zero():
  unit = hybrid_stem.BottleneckUnit(features=32, strides=(2, 2))
  x = jax.random.normal(jax.random.PRNGKey(0), (1, 8, 8, 6))
  variables = jax.jit(unit.init)(jax.random.PRNGKey(1), x)  # one program each, not op by op
  params = variables["params"]
  assert set(params) == {"conv_proj", "gn_proj", "conv1", "gn1", "conv2", "gn2", "conv3", "gn3"}
  assert params["gn3"]["scale"].shape == (128,) and not np.any(params["gn3"]["scale"])
  out = jax.jit(unit.apply)(variables, x)
  assert out.shape == (1, 4, 4, 128)
  proj = hybrid_stem.StdConv(128, (1, 1), (2, 2)).apply({"params": params["conv_proj"]}, x)
  gn = hybrid_stem.group_norm("gn", jnp.float32).apply({"params": params["gn_proj"]}, proj)
  np.testing.assert_allclose(out, jax.nn.relu(gn), rtol=1e-5, atol=1e-5)


def test_unit_without_projection_when_shapes_match():
  unit = hybrid_stem.BottleneckUnit(features=32)
  params = jax.eval_shape(unit.init, jax.random.PRNGKey(0), jnp.zeros((1, 4, 4, 128)))["params"]
  assert "conv_proj" not in params and set(params) == {"conv1", "gn1", "conv2", "gn2", "conv3",
                                                       "gn3"}


@pytest.mark.parametrize("stages,stride", [((), 4), ((3, 4, 9), 16), ((2, 2, 2, 2), 32)])
def test_stem_stride(stages, stride):
  assert hybrid_stem.stem_stride(stages) == stride


def test_group_norm_is_32_groups_with_eps_1e_6():
  """Features with std ~1e-3 (variance ~ eps) make both the eps and the grouping visible
  against a float64 formula; O(1) features would hide the eps."""
  x = jax.random.normal(jax.random.PRNGKey(0), (2, 4, 4, 64)) * 1e-3
  x = x * jnp.linspace(0.5, 2, 64)  # channels of a group differ: the grouping matters
  norm = hybrid_stem.group_norm("gn", jnp.float32)
  out = norm.apply(norm.init(jax.random.PRNGKey(1), x), x)
  groups = np.asarray(x, np.float64).reshape(2, 4, 4, 32, 2)
  mean = groups.mean(axis=(1, 2, 4), keepdims=True)
  var = groups.var(axis=(1, 2, 4), keepdims=True)
  expected = ((groups - mean) / np.sqrt(var + 1e-6)).reshape(x.shape)
  np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4)
