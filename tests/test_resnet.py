"""The hybrid models' ResNet stem (vit_facts.md section 2)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vit_jax.models import resnet


def test_weight_standardisation_uses_population_std_plus_eps():
  kernel = jax.random.normal(jax.random.PRNGKey(0), (3, 3, 4, 5)) * 3 + 1
  out = resnet.standardize_weight(kernel)
  k = np.asarray(kernel, np.float64)
  centred = k - k.mean(axis=(0, 1, 2))
  expected = centred / (np.sqrt((centred**2).mean(axis=(0, 1, 2))) + 1e-5)
  np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6)


def test_std_conv_stores_the_raw_kernel_and_pads_same():
  conv = resnet.StdConv(8, (7, 7), (2, 2))
  x = jax.random.normal(jax.random.PRNGKey(0), (1, 16, 16, 3))
  params = conv.init(jax.random.PRNGKey(1), x)
  out = conv.apply(params, x)
  assert out.shape == (1, 8, 8, 8)  # SAME: ceil(16 / 2)
  kernel = resnet.standardize_weight(params["params"]["kernel"])
  # XLA's SAME for stride 2 pads (2, 3) on a 16-wide input with a 7-wide kernel.
  expected = jax.lax.conv_general_dilated(x, kernel, (2, 2), [(2, 3), (2, 3)],
                                          dimension_numbers=("NHWC", "HWIO", "NHWC"))
  np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)


def test_bottleneck_starts_as_projection_because_gn3_scale_is_zero():
  unit = resnet.BottleneckUnit(features=32, strides=(2, 2))
  x = jax.random.normal(jax.random.PRNGKey(0), (1, 8, 8, 6))
  variables = unit.init(jax.random.PRNGKey(1), x)
  params = variables["params"]
  assert set(params) == {"conv_proj", "gn_proj", "conv1", "gn1", "conv2", "gn2", "conv3", "gn3"}
  assert params["gn3"]["scale"].shape == (128,) and not np.any(params["gn3"]["scale"])
  out = unit.apply(variables, x)
  assert out.shape == (1, 4, 4, 128)
  proj = resnet.StdConv(128, (1, 1), (2, 2)).apply({"params": params["conv_proj"]}, x)
  gn = resnet.group_norm("gn", jnp.float32).apply({"params": params["gn_proj"]}, proj)
  np.testing.assert_allclose(out, jax.nn.relu(gn), rtol=1e-5, atol=1e-5)


def test_unit_without_projection_when_shapes_match():
  unit = resnet.BottleneckUnit(features=32)
  params = unit.init(jax.random.PRNGKey(0), jnp.zeros((1, 4, 4, 128)))["params"]
  assert "conv_proj" not in params


@pytest.mark.parametrize("stages,stride", [((), 4), ((3, 4, 9), 16), ((2, 2, 2, 2), 32)])
def test_stem_stride(stages, stride):
  assert resnet.stem_stride(stages) == stride
