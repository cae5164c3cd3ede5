"""The NaFlex image tower (vit_jax.families.vit.naflex_model) against transformers'
Siglip2VisionModel on random weights: images of mixed aspect ratios in one batch, padded to
the budget, their position tables resized per image with an antialiased filter (PyTorch's
interpolate)."""

import jax
import numpy as np
import pytest
from flax import traverse_util

from torch_libraries import (  # noqa: F401  # pylint: disable=unused-import
    declare_missing_torchvision_ops, fixture_torch)
from vit_jax.base import errors
from vit_jax.families.two_tower import hf_layout
from vit_jax.families.vit import naflex_model as vit_naflex_model
from vit_jax.models import posemb

PATCH, BUDGET = 4, 24
SHAPES = [(4, 6), (6, 2), (3, 3)]  # rows x columns of patches; 24, 12 and 9 of 24 real


@pytest.fixture(name="transformers")
def fixture_transformers(torch):
  declare_missing_torchvision_ops(torch)
  return pytest.importorskip("transformers")


@pytest.mark.parametrize("rows,cols", [(16, 16), (5, 30), (24, 3), (7, 9), (1, 1)])
def test_triangle_weights_equal_torch_antialiased_bilinear(torch, rows, cols):
  grid = np.random.default_rng(0).standard_normal((16, 16, 3)).astype(np.float32)
  ours = np.einsum("ia,jb,abd->ijd", posemb.triangle_weights(rows, 16, rows),
                   posemb.triangle_weights(cols, 16, cols), grid)
  reference = torch.nn.functional.interpolate(
      torch.tensor(grid.transpose(2, 0, 1))[None], size=(rows, cols), mode="bilinear",
      align_corners=False, antialias=True)[0].numpy().transpose(1, 2, 0)
  np.testing.assert_allclose(ours, reference, rtol=1e-5, atol=1e-5)


def test_pooled_output_equals_siglip2_vision_model_with_padding(transformers, torch):
  config = transformers.Siglip2Config(
      text_config=dict(vocab_size=20, hidden_size=16, intermediate_size=32,
                       num_hidden_layers=1, num_attention_heads=2,
                       max_position_embeddings=8),
      vision_config=dict(hidden_size=24, intermediate_size=40, num_hidden_layers=2,
                         num_attention_heads=3, patch_size=PATCH, num_patches=16))
  torch.manual_seed(0)
  hf = transformers.Siglip2Model(config)
  with torch.no_grad():
    for p in hf.parameters():
      p.normal_(0, 0.3)
  hf.eval()
  state = {k: v.numpy() for k, v in hf.state_dict().items()}
  flat = hf_layout.from_hf(state, dict(config.to_dict(), model_type="siglip2"))
  params = traverse_util.unflatten_dict(
      {k[len("img/"):]: v for k, v in flat.items() if k.startswith("img/")}, sep="/")
  model = vit_naflex_model.NaFlexViT(0, PATCH, 24, 40, 3, 2, posemb_grid=4)

  rng = np.random.default_rng(1)
  patches = rng.uniform(-1, 1, (len(SHAPES), BUDGET, PATCH * PATCH * 3)).astype(np.float32)
  mask = np.zeros((len(SHAPES), BUDGET), np.int32)
  for i, (rows, cols) in enumerate(SHAPES):
    mask[i, :rows * cols] = 1
  patches[mask == 0] = 7.0  # padding's values must not matter
  shapes = np.asarray(SHAPES, np.int32)
  ours = jax.jit(model.apply)({"params": params}, patches, mask, shapes)
  with torch.no_grad():
    reference = hf.vision_model(
        pixel_values=torch.tensor(patches), pixel_attention_mask=torch.tensor(mask),
        spatial_shapes=torch.tensor(shapes)).pooler_output.numpy()
  np.testing.assert_allclose(ours, reference, rtol=1e-4, atol=1e-4 * np.abs(reference).max())
  patches[mask == 0] = -3.0
  again = jax.jit(model.apply)({"params": params}, patches, mask, shapes)
  np.testing.assert_allclose(again, ours, rtol=1e-6, atol=1e-6)


def test_a_full_square_grid_is_the_fixed_size_tower(tmp_path):
  """No padding and the table's own grid: NaFlex is the VisionTransformer, bit for bit up
  to rounding, on params load_npz reads from a two-tower file (head included)."""
  import two_tower_helpers  # pylint: disable=import-outside-toplevel
  from vit_jax import load_npz  # pylint: disable=import-outside-toplevel
  from vit_jax.families.two_tower import (  # pylint: disable=import-outside-toplevel
      npz_file as two_tower_load)
  two_tower_load.save_two_tower(two_tower_helpers.random_params(
      two_tower_helpers.tiny_siglip(), 8), tmp_path / "tower.npz")
  module, params = load_npz(str(tmp_path / "tower.npz"), num_classes=5)
  params["head"]["kernel"] = np.random.default_rng(0).standard_normal((16, 5)).astype(np.float32)
  naflex = vit_naflex_model.from_vit(module, grid=4)
  images = np.random.default_rng(1).uniform(-1, 1, (2, 32, 32, 3)).astype(np.float32)
  patches = images.reshape(2, 4, 8, 4, 8, 3).transpose(0, 1, 3, 2, 4, 5).reshape(2, 16, -1)
  ours = jax.jit(naflex.apply)({"params": params}, patches, np.ones((2, 16), np.int32),
                               np.asarray([[4, 4]] * 2, np.int32))
  fixed = jax.jit(module.apply)({"params": params}, images)
  np.testing.assert_allclose(ours, fixed, rtol=1e-5, atol=1e-5)
  with pytest.raises(errors.InvalidInput, match="MAP-pooled"):
    vit_naflex_model.from_vit(module.clone(classifier="gap"), grid=4)


def test_training_settings_run_through_the_vits_encoder():
  """Dropout and stochastic depth act in training (and only there: the scanned model below
  has dropout); scanned and rematerialised blocks are the same function, on the same
  (stacked) parameters."""
  from vit_jax.models import encoder_blocks  # pylint: disable=import-outside-toplevel
  model = vit_naflex_model.NaFlexViT(3, PATCH, 24, 40, 3, 2, posemb_grid=4)
  rng = np.random.default_rng(0)
  patches = rng.uniform(-1, 1, (3, BUDGET, PATCH * PATCH * 3)).astype(np.float32)
  mask = np.zeros((3, BUDGET), np.int32)
  for i, (rows, cols) in enumerate(SHAPES):
    mask[i, :rows * cols] = 1
  image = {"patches": patches, "mask": mask, "grid": np.asarray(SHAPES, np.int32)}
  params = jax.jit(model.init)(jax.random.PRNGKey(0), image)["params"]  # one program
  params["head"]["kernel"] = rng.standard_normal((24, 3)).astype(np.float32)
  run = lambda module, p, **kw: jax.jit(lambda p: module.apply({"params": p}, image, **kw))(p)
  plain = run(model, params)
  dropped = model.clone(dropout_rate=0.3, stochastic_depth=0.5)
  keys = {"dropout": jax.random.PRNGKey(1)}
  assert np.abs(run(dropped, params, train=True, rngs=keys) - plain).max() > 1e-3
  scanned = model.clone(scan_layers=True, remat_policy="full", dropout_rate=0.3)
  np.testing.assert_allclose(run(scanned, encoder_blocks.to_scan_layout(params)), plain,
                             rtol=1e-5, atol=1e-6)
