"""The contrastive objective's step: from a small pair's file, one step on one device and on
eight (data, and data x fsdp, the sigmoid loss chunked round the devices) gives the same
loss and the same parameters; the softmax loss too; its eval step; the one-line refusals.

The eight-device steps run in a subprocess: the device count is fixed when jax starts."""

import os
import subprocess
import sys

import numpy as np
import pytest

from helpers import subprocess_env
from vit_jax.base import errors

LAYOUTS = {"one": {"data": 1}, "data8": {"data": 8}, "data4_fsdp2": {"data": 4, "fsdp": 2}}


def pair_config(init, vocab, loss="sigmoid"):
  """A run's config of the pair in `init` (an .npz) with its vocabulary."""
  from vit_jax.families.two_tower import training_recipes  # pylint: disable=import-outside-toplevel
  from vit_jax.training import config_defaults  # pylint: disable=import-outside-toplevel
  config = training_recipes.siglip_demo(config_defaults.get_config())
  config.contrastive.update(init=init, loss=loss)
  config.text.update(tokenizer=vocab, length=8)
  config.pp.crop, config.batch = 32, 16
  config.base_lr, config.warmup_steps, config.total_steps = 0.1, 0, 4
  # SGD: a step is the gradient's own size (Adam's first step divides by it: float32
  # rounding of tiny gradients would move it by more than rounding)
  config.optimizer, config.momentum = "sgd", 0.9
  return config


def write_pair(folder):
  """A random small pair (8 px patches, 2 blocks each) as folder/pair.npz with a WordPiece
  vocabulary beside it -> (npz path, vocabulary path)."""
  import two_tower_helpers  # pylint: disable=import-outside-toplevel
  from vit_jax import save_two_tower  # pylint: disable=import-outside-toplevel
  model = two_tower_helpers.tiny_siglip(vocab_size=20, max_len=8)
  save_two_tower(two_tower_helpers.random_params(model, 8), folder / "pair.npz")
  words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *"abcdefghijklmno"]
  (folder / "vocab.txt").write_text("\n".join(words) + "\n")
  return str(folder / "pair.npz"), str(folder / "vocab.txt")


def run_layouts(folder, results_path):
  """One step per layout and loss, from the same start: saves each run's loss and params."""
  import pathlib  # pylint: disable=import-outside-toplevel
  import jax  # pylint: disable=import-outside-toplevel
  from vit_jax.training import objectives, sharding, state_and_step  # pylint: disable=import-outside-toplevel

  init, vocab = write_pair(pathlib.Path(folder))
  rng = np.random.default_rng(0)
  batch = {"image": rng.uniform(-1, 1, (16, 32, 32, 3)).astype(np.float32),
           "text": rng.integers(0, 20, (16, 8)).astype(np.int32),
           "label": np.zeros(16, np.int32)}
  results = {}
  for loss in ("sigmoid", "softmax"):
    config = pair_config(init, vocab, loss)
    objective = objectives.get(config)
    module, params = objective.create_model(config, 0, load_pretrained=True)
    results.update({f"{loss}/start/params/{i}": np.asarray(leaf)
                    for i, leaf in enumerate(jax.tree.leaves(params))})
    for name, layout in LAYOUTS.items():
      devices = jax.devices()[:1] if name == "one" else jax.devices()
      mesh = sharding.make_mesh(layout, devices)
      run = state_and_step.build(config, module, mesh, objective)
      state = run.from_params(params)
      placed = sharding.put(batch, jax.tree.map(lambda _: run.batch_sharding, batch))
      state, metrics = run.step(state, placed,
                                sharding.put(jax.random.PRNGKey(0), run.replicated),
                                run.placed_schedule())
      results[f"{loss}/{name}/loss"] = np.asarray(metrics["loss"])
      leaves = jax.tree.leaves(sharding.to_host(state.params))
      results.update({f"{loss}/{name}/params/{i}": leaf for i, leaf in enumerate(leaves)})
  np.savez(results_path, **results)


@pytest.fixture(name="results", scope="module")
def fixture_results(tmp_path_factory):
  folder = tmp_path_factory.mktemp("pair")
  out = subprocess.run([sys.executable, __file__, str(folder), str(folder / "results.npz")],
                       env=subprocess_env(devices=8, PYTHONPATH=os.pathsep.join(sys.path)),
                       capture_output=True, text=True,
                       timeout=600)
  assert out.returncode == 0, out.stderr[-3000:]
  with np.load(folder / "results.npz") as saved:
    return {key: saved[key] for key in saved.files}


@pytest.mark.parametrize("loss", ["sigmoid", "softmax"])
@pytest.mark.parametrize("layout", ["data8", "data4_fsdp2"])
def test_one_step_on_eight_devices_is_the_one_device_step(results, loss, layout):
  one = float(results[f"{loss}/one/loss"])
  assert np.isfinite(one) and one > 0
  np.testing.assert_allclose(float(results[f"{loss}/{layout}/loss"]), one, rtol=1e-5)
  count = sum(key.startswith(f"{loss}/one/params/") for key in results)
  assert count > 20
  moved = 0
  for i in range(count):
    reference = results[f"{loss}/one/params/{i}"]
    np.testing.assert_allclose(results[f"{loss}/{layout}/params/{i}"], reference, rtol=1e-4,
                               atol=1e-6)
    moved += not np.allclose(reference, results[f"{loss}/start/params/{i}"])
  assert moved > count // 2  # the step trained both towers


def test_refusals_before_anything_is_read(tmp_path):
  from vit_jax.training.objectives import contrastive  # pylint: disable=import-outside-toplevel
  init, vocab = write_pair(tmp_path)
  config = pair_config(init, vocab)
  config.accum_steps = 2
  with pytest.raises(errors.InvalidInput, match="accum_steps=1"):
    contrastive.check_config(config)
  config = pair_config(init, vocab)
  config.contrastive.loss = "hinge"
  with pytest.raises(errors.InvalidInput, match="choose one of sigmoid, softmax"):
    contrastive.check_config(config)
  config = pair_config(init, vocab)
  config.contrastive.out_dim = (0, None)
  with pytest.raises(errors.InvalidInput, match="out_dim"):
    contrastive.check_config(config)


if __name__ == "__main__":
  run_layouts(sys.argv[1], sys.argv[2])
