"""vit_jax.nnx: each family's model as an nnx.Module (flax's nnx.bridge over the one Linen
definition) computes the Linen model's outputs, shows the Linen params' names and values,
splits and merges as NNX modules do, and saves back to the released layout that the tools
read. Tiny models with random params (tests/conftest.py), so a wrongly mapped array shows."""

import jax
import numpy as np
import optax
import pytest
from flax import nnx, traverse_util

import two_tower_helpers
import vit_jax
from conftest import TINY, random_params, tiny_model
from helpers import run_in_process
from vit_jax import nnx as vit_nnx
from vit_jax import predict
from vit_jax.base import errors
from vit_jax.data import image_files
from vit_jax.families.vit import naflex_model

TINY_MIXER = dict(patch_size=4, hidden_dim=32, num_blocks=2, tokens_mlp_dim=8,
                  channels_mlp_dim=64)


def saved(path, module, image_size):
  """(path, params) of random params of `module` saved with vit_jax.save_npz."""
  params = random_params(module, image_size)
  path = str(path)
  vit_jax.save_npz(params, path)
  return path, params


def flat(tree):
  return {key: np.asarray(value) for key, value in
          traverse_util.flatten_dict(tree, sep="/").items()}


def nnx_params(model):
  return flat(nnx.to_pure_dict(nnx.state(model, nnx.Param)))


@nnx.jit
def nnx_apply(model, *inputs):
  return model(*inputs)


@pytest.fixture(name="files", scope="module")
def fixture_files(tmp_path_factory):
  """{family: (path, linen module, params, inputs)} saved once for the module."""
  folder = tmp_path_factory.mktemp("nnx")
  rng = np.random.default_rng(0)
  images16 = rng.uniform(-1, 1, (2, 16, 16, 3)).astype(np.float32)
  images32 = rng.uniform(-1, 1, (2, 32, 32, 3)).astype(np.float32)
  found = {}
  for family, module, images in (
      ("vit", tiny_model(), images16),
      ("hybrid", tiny_model(resnet_stages=(2, 1), patch_size=1), images32),
      ("mixer", vit_jax.create_model("Mixer-B_16", num_classes=5, **TINY_MIXER), images16),
      ("map", tiny_model(classifier="map"), images16)):
    path, params = saved(folder / f"{family}.npz", module, images.shape[1])
    found[family] = (path, module, params, images)
  return found


@pytest.mark.parametrize("family", ["vit", "hybrid", "mixer"])
def test_a_file_loads_as_the_linen_model_with_its_names(files, family):
  path, module, params, images = files[family]
  model = vit_nnx.load_npz(path)
  assert isinstance(model, nnx.Module)
  assert nnx_params(model).keys() == flat(params).keys()  # the released names, as Linen's
  jax.tree.map(np.testing.assert_array_equal, nnx_params(model), flat(params))
  expected = jax.jit(module.apply)({"params": params}, images)
  np.testing.assert_allclose(nnx_apply(model, images), expected, rtol=1e-5, atol=1e-5)


def test_naflex_runs_the_map_vits_params_on_patches(files):
  path, module, params, _ = files["map"]
  model = vit_nnx.load_npz(path, naflex=True)
  rng = np.random.default_rng(1)
  patches = rng.uniform(-1, 1, (2, 16, 4 * 4 * 3)).astype(np.float32)
  mask = np.ones((2, 16), np.int32)
  mask[1, 12:] = 0  # the second image: a 2 x 6 grid, padded to the budget
  grid = np.array([[4, 4], [2, 6]], np.int32)
  linen = naflex_model.from_vit(module, 4)
  expected = jax.jit(linen.apply)({"params": params}, patches, mask, grid)
  np.testing.assert_allclose(nnx_apply(model, patches, mask, grid), expected,
                             rtol=1e-5, atol=1e-5)
  with pytest.raises(errors.InvalidInput, match=r"^naflex=True runs a MAP-pooled ViT .* "
                     r"an MLP-Mixer model: leave naflex out$"):
    vit_nnx.load_npz(files["mixer"][0], naflex=True)


def test_a_pair_loads_with_its_methods_and_saves_back(tmp_path):
  module = two_tower_helpers.tiny_siglip()
  params = two_tower_helpers.random_params(module, 8)
  path = str(tmp_path / "pair.npz")
  vit_jax.save_two_tower(params, path)
  model, info = vit_nnx.load_two_tower(path)
  assert info.family == "siglip"
  rng = np.random.default_rng(2)
  images = rng.uniform(-1, 1, (2, 32, 32, 3)).astype(np.float32)
  tokens = rng.integers(1, 50, (3, 8)).astype(np.int32)
  np.testing.assert_allclose(nnx.jit(lambda m, x, t: m(x, t)[2])(model, images, tokens),
                             two_tower_helpers.logits(module, params, images, tokens),
                             rtol=1e-5, atol=1e-5)
  zimg = nnx.jit(lambda m, x: m.embed_images(x))(model, images)
  assert zimg.shape == (2, 16)
  vit_nnx.save_npz(model, tmp_path / "again.npz")
  _, again, _ = vit_jax.load_two_tower(str(tmp_path / "again.npz"))
  jax.tree.map(np.testing.assert_array_equal, flat(again), flat(params["params"]))


def test_split_merge_and_a_trained_change_save_in_the_released_layout(files, tmp_path):
  path, _, params, images = files["vit"]
  model = vit_nnx.load_npz(path)
  graphdef, state = nnx.split(model)
  merged = jax.jit(lambda s, x: nnx.merge(graphdef, s)(x))(state, images)
  np.testing.assert_array_equal(merged, nnx_apply(model, images))

  model.head["bias"][...] += 1.0  # what a training step would change
  names = [f"digit {i}" for i in range(5)]
  vit_nnx.save_npz(model, tmp_path / "tuned.npz", class_names=names)
  _, loaded = vit_jax.load_npz(str(tmp_path / "tuned.npz"))
  expected = flat(params)
  expected["head/bias"] = expected["head/bias"] + 1
  jax.tree.map(np.testing.assert_array_equal, flat(loaded), expected)
  assert vit_jax.read_class_names(str(tmp_path / "tuned.npz")) == names


def test_predict_reads_a_file_an_nnx_model_saved(files, tmp_path):
  """The command-line tool on an NNX model's file: the NNX model's own probabilities."""
  model = vit_nnx.load_npz(files["vit"][0])
  vit_nnx.save_npz(model, tmp_path / "nnx.npz")
  image = tmp_path / "digit.png"
  from PIL import Image  # pylint: disable=import-outside-toplevel
  Image.fromarray(np.random.default_rng(3).integers(0, 256, (20, 20, 3), np.uint8)).save(image)
  done = run_in_process(predict, f"--checkpoint={tmp_path / 'nnx.npz'}", "--top_k=2", image)
  assert done.returncode == 0, done.stderr
  printed = [line.split() for line in done.stdout.splitlines() if line.startswith(" ")]
  probs = np.asarray(jax.nn.softmax(nnx_apply(model, image_files.load_image(str(image), 16)[None])))[0]
  assert [int(index) for _, index in printed] == list(np.argsort(-probs)[:2])
  np.testing.assert_allclose([float(p) for p, _ in printed], np.sort(probs)[::-1][:2],
                             atol=1e-3)


def test_create_model_initialises_as_the_linen_init_does():
  model = vit_nnx.create_model("Ti_16", num_classes=3, image_size=16, rngs=nnx.Rngs(7),
                               **TINY)
  module = vit_jax.create_model("Ti_16", num_classes=3, **TINY)
  expected = jax.jit(module.init)(nnx.Rngs(7).params(), np.zeros((1, 16, 16, 3)))["params"]
  jax.tree.map(np.testing.assert_array_equal, nnx_params(model), flat(expected))


def test_mistakes_are_one_line():
  with pytest.raises(errors.InvalidInput, match=r"^expected a model that vit_jax.nnx made .* "
                     r"got a Linear: wrap .*from_linen\(module, params\)$"):
    vit_nnx.save_npz(nnx.Linear(2, 3, rngs=nnx.Rngs(0)), "/tmp/never.npz")
  with pytest.raises(errors.InvalidInput, match=r"^rngs must be an int seed or an nnx.Rngs"):
    vit_nnx.from_linen(tiny_model(), {}, rngs="0")
  with pytest.raises(errors.InvalidInput, match=r"^the rules place parameters on a mesh of "
                     r"the axes data, fsdp, tensor, got batch: make it with "):
    vit_nnx.shard(vit_nnx.from_linen(tiny_model(), {}), jax.make_mesh((1,), ("batch",)))
  with pytest.raises(errors.InvalidInput, match=r"^image_size=18 is not a multiple of the "
                     r"model's 4-pixel patches: use e.g. 16$"):
    vit_nnx.create_model("Ti_16", num_classes=3, image_size=18, **TINY)


def test_a_sharded_scanned_model_trains_with_the_linen_gradients():
  """shard's annotations (metadata the Linen model then reads boxed, scanned blocks too)
  change no number: the gradients are the Linen model's, and the optimizer state carries
  the parameters' annotations."""
  module = tiny_model(scan_layers=True)
  params = random_params(module, 16)
  model = vit_nnx.shard(vit_nnx.from_linen(module, params), vit_nnx.make_mesh({"data": 1}))
  kernel = model.Transformer["encoderblock"]["MlpBlock_3"]["Dense_0"]["kernel"]
  assert kernel.get_metadata()["out_sharding"] == (None, None, None)
  images = np.random.default_rng(4).uniform(-1, 1, (2, 16, 16, 3)).astype(np.float32)
  loss = lambda logits: (logits ** 2).mean()
  grads = nnx.jit(lambda m: nnx.grad(lambda m: loss(m(images)))(m))(model)
  expected = jax.jit(jax.grad(lambda p: loss(module.apply({"params": p}, images))))(params)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6),
               flat(nnx.to_pure_dict(grads)), flat(expected))
  optimizer = nnx.Optimizer(model, optax.adam(1e-3), wrt=nnx.Param)
  mu = optimizer.opt_state[0].mu["Transformer"]["encoderblock"]["MlpBlock_3"]["Dense_0"]
  assert mu["kernel"].get_metadata()["out_sharding"] == (None, None, None)
