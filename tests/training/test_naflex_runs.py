"""NaFlex end to end through the main job (config.pp.max_patches, configs/siglip2_b16_naflex.py):
a tiny random-weight SigLIP 2 tower in big_vision's two-tower layout fine-tuned on the digits
(tf.data) and on an image folder of mixed aspect ratios (Grain), each image at its own
aspect ratio; its params.npz is a MAP-pooled ViT classifier that records its budget, so
predict, and a run that starts from it, read it as NaFlex again."""

import jax
import numpy as np
import pytest
from flax import traverse_util

from helpers import load_module, run_in_process
from naflex_folder import write_mixed_aspect_folder
from two_tower_helpers import random_params, tiny_siglip
from vit_jax import load_npz, predict
from vit_jax.checkpoints.npz import read_max_patches
from vit_jax.families.two_tower import npz_file

TINY = dict(patch_size=8, hidden_size=16, mlp_dim=32, num_heads=2, num_layers=2)
RUN = dict(total_steps=6, warmup_steps=2, batch=32, batch_eval=128, accum_steps=1,
           progress_every=2, eval_every=3, checkpoint_every=3, layer_decay=1.0, base_lr=3e-2)


def tiny_config(pretrained, dataset, **overrides):
  """configs/siglip2_b16_naflex.py:DATASET with the tiny tower and a few steps."""
  config = load_module("siglip2_b16_naflex.py").get_config(dataset)
  config.model.update(TINY)
  config.pretrained = pretrained
  config.update({**RUN, **overrides})
  return config


@pytest.fixture(name="tower", scope="module")
def fixture_tower(tmp_path_factory):
  """A two-tower .npz whose image tower has a 4 x 4 table of 8 px patches; its arrays."""
  path = tmp_path_factory.mktemp("naflex_tower") / "tiny.npz"
  params = random_params(tiny_siglip(), 8)
  npz_file.save_two_tower(params, path)
  return str(path), traverse_util.flatten_dict(params["params"]["img"], sep="/")


def train(config, workdir):
  from vit_jax.training import loop  # pylint: disable=import-outside-toplevel
  config.lock()
  return workdir, loop.train_and_evaluate(config, str(workdir))


@pytest.fixture(name="digits_run", scope="module")
def fixture_digits_run(tower, tmp_path_factory):
  """The digits (8 x 8 px) read by tf.data in at most 9 patches: 3 x 3 of 8 px."""
  config = tiny_config(tower[0], "digits", loader="tf")
  config.pp.max_patches = 9
  return train(config, tmp_path_factory.mktemp("naflex") / "digits")


def test_the_tower_fine_tunes_on_the_digits_and_keeps_its_table(digits_run, tower):
  workdir, result = digits_run
  assert np.isfinite(result["eval/loss"]) and result["eval/examples"] == 300
  module, params = load_npz(str(workdir / "params.npz"))
  flat = traverse_util.flatten_dict(params, sep="/")
  assert (module.classifier, module.num_classes, module.patch_size) == ("map", 10, 8)
  table = flat["Transformer/posembed_input/pos_embedding"]
  assert table.shape == (1, 16, 16)  # the file's own 4 x 4 grid, resized per image in the step
  assert 0 < np.abs(table - tower[1]["Transformer/posembed_input/pos_embedding"]).max() < 0.2
  assert np.abs(flat["head/kernel"]).max() > 0  # trained from zero


def test_predict_reads_the_fine_tuned_classifier_at_its_recorded_budget(digits_run, tmp_path):
  workdir, _ = digits_run
  from PIL import Image  # pylint: disable=import-outside-toplevel
  paths = []
  for name, shape in (("wide", (10, 30)), ("tall", (28, 12))):
    paths.append(tmp_path / f"{name}.png")
    pixels = np.random.default_rng(len(paths)).integers(0, 255, (*shape, 3), np.uint8)
    Image.fromarray(pixels).save(paths[-1])
  assert read_max_patches(workdir / "params.npz") == 9  # the run's budget rides in the file
  done = run_in_process(predict, f"--checkpoint={workdir / 'params.npz'}", "--top_k=2", *paths)
  assert done.returncode == 0, done.stderr
  assert done.stderr.strip().splitlines()[-1].endswith(": NaFlex, 9 patches, from the file")
  assert len([line for line in done.stdout.splitlines() if line.startswith(" ")]) == 4


def test_a_folder_of_mixed_aspect_ratios_trains_with_grain(digits_run, tmp_path):
  """Tall, wide and square images in every batch, read by Grain; the run starts from the
  digits run's params.npz with pp.max_patches left None, so at the 9 patches it records."""
  folder = write_mixed_aspect_folder(tmp_path / "images")
  config = tiny_config(str(digits_run[0] / "params.npz"), str(folder), loader="grain",
                       batch=6, batch_eval=12, total_steps=10, eval_every=5,
                       checkpoint_every=10)
  config.pp.max_patches = None
  workdir, result = train(config, tmp_path / "run")
  assert result["eval/examples"] == 12 and np.isfinite(result["eval/loss"])
  assert result["eval/accuracy"] > 0.5  # three colour classes: chance is a third
  assert jax.tree.leaves(load_npz(str(workdir / "params.npz"))[1])
  assert read_max_patches(workdir / "params.npz") == 9
