"""The contrastive losses: the formulas (a numpy transcription in float64), transformers'
SiglipModel loss on a tiny model's outputs, and the chunked sigmoid loss's value and
gradients equal to the plain one on 1, 2 and 8 devices (data, fsdp, data x fsdp meshes).

The several-device runs are in a subprocess: the device count is fixed when jax starts."""

import math
import os
import subprocess
import sys

import ml_collections
import numpy as np
import pytest

from helpers import subprocess_env
from torch_libraries import (  # noqa: F401  # pylint: disable=unused-import
    declare_missing_torchvision_ops, fixture_torch, fixture_transformers)
from vit_jax.base import errors
from vit_jax.training.objectives import contrastive_loss

BATCH, DIM = 16, 8
# name: (mesh, devices); the batch is split over data x fsdp, embeddings whole over tensor
LAYOUTS = {"one": ({"data": 1}, 1), "data2": ({"data": 2}, 2), "data8": ({"data": 8}, 8),
           "fsdp8": ({"fsdp": 8}, 8), "data2_fsdp4": ({"data": 2, "fsdp": 4}, 8),
           "data4_tensor2": ({"data": 4, "tensor": 2}, 8)}
MEMORY_BATCH, MEMORY_DIM = 2048, 64  # compiled only, on 8 devices


def embeddings(seed, batch=BATCH, dim=DIM):
  """Normalised float32 rows (the towers' outputs), positives a little aligned."""
  rng = np.random.default_rng(seed)
  images = rng.normal(size=(batch, dim))
  texts = images + 1.5 * rng.normal(size=(batch, dim))
  unit = lambda x: (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)
  return unit(images), unit(texts)


def numpy_sigmoid(zimg, ztxt, t, b):
  logits = np.exp(t) * zimg.astype(np.float64) @ ztxt.T.astype(np.float64) + b
  labels = 2 * np.eye(len(zimg)) - 1
  return np.mean(np.sum(np.log1p(np.exp(-labels * logits)), axis=1))


def numpy_softmax(zimg, ztxt, t):
  logits = np.exp(t) * zimg.astype(np.float64) @ ztxt.T.astype(np.float64)
  log_rows = logits - np.log(np.sum(np.exp(logits), axis=1, keepdims=True))
  log_columns = logits - np.log(np.sum(np.exp(logits), axis=0, keepdims=True))
  return np.mean(-(np.diag(log_rows) + np.diag(log_columns)) / 2)


@pytest.mark.parametrize("t, b", [(math.log(10.0), -10.0),  # scalars, and the model's (1,)
                                  (np.float32([2.3]), np.float32([-2.71]))])
def test_losses_are_the_formulas(t, b):
  zimg, ztxt = embeddings(0)
  np.testing.assert_allclose(contrastive_loss.sigmoid_loss(zimg, ztxt, t, b),
                             numpy_sigmoid(zimg, ztxt, np.squeeze(t), np.squeeze(b)), rtol=1e-5)
  np.testing.assert_allclose(contrastive_loss.softmax_loss(zimg, ztxt, t),
                             numpy_softmax(zimg, ztxt, np.squeeze(t)), rtol=1e-5)
  # without a mesh (nothing to split) the chunked loss is the plain one
  np.testing.assert_allclose(contrastive_loss.chunked_sigmoid_loss(zimg, ztxt, t, b),
                             numpy_sigmoid(zimg, ztxt, np.squeeze(t), np.squeeze(b)), rtol=1e-5)


def test_sigmoid_loss_is_transformers_siglip_loss(torch, transformers):
  """transformers' SiglipModel(return_loss=True) sums each text's row of logits_per_text
  and averages over the texts; ours (big_vision's) sums each image's row and averages over
  the images. The labels are symmetric and the matrix square, so both are the sum over all
  pairs divided by the batch: the same number, no constant factor between them."""
  declare_missing_torchvision_ops(torch)
  layers = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                num_attention_heads=2)
  config = transformers.SiglipConfig(
      text_config=dict(vocab_size=50, max_position_embeddings=8, pad_token_id=1,
                       bos_token_id=48, eos_token_id=49, **layers),
      vision_config=dict(image_size=32, patch_size=8, **layers))
  torch.manual_seed(0)
  model = transformers.SiglipModel(config).eval()
  with torch.no_grad():
    model.logit_scale.fill_(math.log(10.0))  # transformers starts both at 0
    model.logit_bias.fill_(-2.71)
    out = model(input_ids=torch.randint(0, 50, (6, 8)), pixel_values=torch.randn(6, 3, 32, 32),
                return_loss=True)
  zimg, ztxt = out.image_embeds.numpy(), out.text_embeds.numpy()
  t, b = model.logit_scale.detach().numpy(), model.logit_bias.detach().numpy()
  assert out.loss.item() > 1.0  # the random towers tell the pairs apart badly
  np.testing.assert_allclose(contrastive_loss.sigmoid_loss(zimg, ztxt, t, b), out.loss.item(),
                             rtol=1e-5)
  np.testing.assert_allclose(contrastive_loss.sigmoid_loss(ztxt, zimg, t, b), out.loss.item(),
                             rtol=1e-5)  # texts' rows: the same sum


def run_layouts(results_path):
  """The plain loss and gradients on one unsharded device; the chunked ones jitted with the
  batch split over each layout's data x fsdp (mesh=None: the abstract mesh of
  sharding.on_mesh; data4_tensor2 passes its mesh itself); the compiled temporary memory
  of both losses on 8 devices. Saved to results_path as an npz."""
  import jax  # pylint: disable=import-outside-toplevel
  from vit_jax.training import sharding  # pylint: disable=import-outside-toplevel

  zimg, ztxt = embeddings(1)
  args = (zimg, ztxt, np.float32([math.log(10.0)]), np.float32([-10.0]))
  grads = lambda loss: jax.value_and_grad(loss, argnums=(0, 1, 2, 3))
  results = {}
  value, grad = jax.jit(grads(contrastive_loss.sigmoid_loss))(*args)
  results.update({"plain/loss": value, **{f"plain/grad{i}": g for i, g in enumerate(grad)}})
  for name, (layout, count) in LAYOUTS.items():
    mesh = sharding.make_mesh(layout, jax.devices()[:count])
    shardings = (sharding.batch_sharding(mesh),) * 2 + (sharding.replicated(mesh),) * 2
    if name == "data4_tensor2":
      loss = lambda *a, mesh=mesh: contrastive_loss.chunked_sigmoid_loss(*a, mesh=mesh)
      step = jax.jit(grads(loss), in_shardings=shardings)
    else:
      step = jax.jit(sharding.on_mesh(mesh, grads(contrastive_loss.chunked_sigmoid_loss)),
                     in_shardings=shardings)
    value, grad = step(*jax.device_put(args, shardings))
    results[f"{name}/loss"] = value
    results.update({f"{name}/grad{i}": g for i, g in enumerate(grad)})
    if name == "data8":
      shapes = [jax.ShapeDtypeStruct(shape, np.float32, sharding=s)
                for shape, s in zip(((MEMORY_BATCH, MEMORY_DIM),) * 2 + ((1,),) * 2, shardings)]
      for kind, loss in (("plain", contrastive_loss.sigmoid_loss),
                         ("chunked", contrastive_loss.chunked_sigmoid_loss)):
        compiled = jax.jit(sharding.on_mesh(mesh, grads(loss)),
                           in_shardings=shardings).lower(*shapes).compile()
        results[f"memory/{kind}"] = compiled.memory_analysis().temp_size_in_bytes
  np.savez(results_path, **{key: np.asarray(value) for key, value in results.items()})


@pytest.fixture(name="results", scope="module")
def fixture_results(tmp_path_factory):
  path = tmp_path_factory.mktemp("chunked") / "results.npz"
  out = subprocess.run([sys.executable, __file__, str(path)],
                       env=subprocess_env(devices=8, PYTHONPATH=os.pathsep.join(sys.path)),
                       capture_output=True, text=True, timeout=600)
  assert out.returncode == 0, out.stderr[-3000:]
  with np.load(path) as saved:
    return {key: saved[key] for key in saved.files}


@pytest.mark.parametrize("layout", LAYOUTS)
def test_chunked_loss_and_gradients_are_the_plain_ones(results, layout):
  """Relative error: the largest difference over the largest magnitude, per array."""
  assert results["plain/loss"] > 1.0
  for key in ("loss", "grad0", "grad1", "grad2", "grad3"):
    plain, chunked = results[f"plain/{key}"], results[f"{layout}/{key}"]
    assert chunked.shape == plain.shape and np.max(np.abs(plain)) > 0, key
    assert np.max(np.abs(chunked - plain)) <= 1e-5 * np.max(np.abs(plain)), key


def test_memory_estimate_bounds_what_xla_compiles(results):
  """On 8 devices the chunked loss needs a fraction of the plain one's memory, and the
  planner's estimate is XLA's or a little more (the plain one's is XLA's but for a few
  scalars)."""
  assert results["memory/chunked"] * 4 < results["memory/plain"]
  for kind in ("plain", "chunked"):
    estimate = contrastive_loss.loss_memory_bytes(MEMORY_BATCH, 8, MEMORY_DIM, kind == "chunked")
    assert 0.99 * results[f"memory/{kind}"] <= estimate <= 1.5 * results[f"memory/{kind}"], kind


def test_memory_estimate_grows_with_the_rows_per_device():
  plain = contrastive_loss.loss_memory_bytes(32768, 16, 1152, chunked=False)
  chunked = contrastive_loss.loss_memory_bytes(32768, 16, 1152, chunked=True)
  assert plain == 4 * (3 * 2048 * 32768 + 32768 * 1152)
  assert chunked == 4 * 3 * 2048 * (2048 + 1152)
  assert contrastive_loss.loss_memory_bytes(32768, 32, 1152, chunked=True) < chunked / 2
  assert contrastive_loss.loss_memory_bytes(512, 1, 768, chunked=True) == (
      contrastive_loss.loss_memory_bytes(512, 1, 768, chunked=False))


def test_config_picks_the_loss():
  config = ml_collections.ConfigDict({"contrastive": {"loss": "sigmoid", "chunked": True}})
  assert contrastive_loss.loss_fn(config) is contrastive_loss.chunked_sigmoid_loss
  config.contrastive.chunked = False
  assert contrastive_loss.loss_fn(config) is contrastive_loss.sigmoid_loss
  config.contrastive.loss = "softmax"
  zimg, ztxt = embeddings(2)
  np.testing.assert_allclose(contrastive_loss.loss_fn(config)(zimg, ztxt, 1.0, None),
                             contrastive_loss.softmax_loss(zimg, ztxt, 1.0))
  config.contrastive.loss = "hinge"
  with pytest.raises(errors.InvalidInput, match=r"^unknown config.contrastive.loss='hinge'; "
                                                "choose one of sigmoid, softmax$"):
    contrastive_loss.loss_fn(config)


if __name__ == "__main__":
  run_layouts(sys.argv[1])
