"""Any input size and patch size at run time: the position embedding resized inside the model
equals the load-time resize bit for bit; FlexiViT's underlying kernel and grid."""

import jax
import numpy as np
import pytest

from conftest import random_params, tiny_model
from vit_jax import load_npz, save_npz
from vit_jax.models import patch_resize, posemb


def images(side=16):
  return np.random.default_rng(0).uniform(-1, 1, (2, side, side, 3)).astype(np.float32)


@pytest.fixture(name="tiny", scope="module")
def fixture_tiny(tmp_path_factory):
  """A saved 2-block model, patch 4 at 16 px: a 4x4 grid."""
  path = tmp_path_factory.mktemp("tiny") / "tiny.npz"
  save_npz(random_params(tiny_model(), 16), path)
  return path


@pytest.mark.parametrize("size", [(16, 28), (8, 12)])  # grows one side; shrinks both
def test_run_time_interpolation_equals_the_load_time_resize_bit_for_bit(tiny, size):
  x = jax.random.uniform(jax.random.PRNGKey(1), (2, *size, 3), minval=-1, maxval=1)
  native_module, native = load_npz(tiny)
  resized_module, resized = load_npz(tiny, image_size=size)
  assert native["Transformer"]["posembed_input"]["pos_embedding"].shape == (1, 17, 32)
  run_time = jax.jit(native_module.apply)({"params": native}, x)
  load_time = jax.jit(resized_module.apply)({"params": resized}, x)
  np.testing.assert_array_equal(run_time, load_time)


def test_underlying_kernel_and_grid_are_resized_in_the_forward_pass():
  """A FlexiViT-style model (8x8 kernel, 3x3 table stored) at patch 4 on 16 px computes
  what the plain patch-4 model computes with the PI-resized kernel and resized table."""
  flexi = tiny_model(kernel_size=8, posemb_grid=(3, 3))
  params = random_params(flexi, 16)
  assert params["embedding"]["kernel"].shape == (8, 8, 3, 32)
  assert params["Transformer"]["posembed_input"]["pos_embedding"].shape == (1, 10, 32)
  fixed = dict(params, embedding={
      "kernel": patch_resize.pi_resize_kernel(params["embedding"]["kernel"], 4),
      "bias": params["embedding"]["bias"]})
  fixed["Transformer"] = dict(params["Transformer"], posembed_input={
      "pos_embedding": posemb.resize_posemb(
          params["Transformer"]["posembed_input"]["pos_embedding"], (4, 4), True)})
  x = images()
  np.testing.assert_allclose(jax.jit(flexi.apply)({"params": params}, x),
                             jax.jit(tiny_model().apply)({"params": fixed}, x),
                             rtol=1e-5, atol=1e-6)
