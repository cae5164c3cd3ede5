"""SavedModel exports reload in TensorFlow and compute the Flax logits at any batch size;
with --with_preprocessing, image files' bytes give vit_jax.predict's classes."""

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from export_cases import (CASES, NAFLEX_BUDGET, checkpoints,  # noqa: F401 (a fixture)
                          Exports, flax_logits, naflex_checkpoint, naflex_inputs_and_logits,
                          noise_and_logits, read_metadata, relative)
from vit_jax import export, predict
from vit_jax.checkpoints import npz
from vit_jax.data import image_files


@pytest.fixture(scope="module")
def exported(checkpoints, tmp_path_factory):
  return Exports("saved_model", checkpoints, tmp_path_factory.mktemp("saved_model"))


def serving(out):
  return tf.saved_model.load(f"{out}/saved_model").signatures["serving_default"]


@pytest.mark.parametrize("case", CASES)
def test_reloads_and_matches_flax_at_batch_1_and_7(exported, checkpoints, case):
  path, _ = checkpoints[case]
  meta = read_metadata(exported[case])
  serve = serving(exported[case])
  images, truth = noise_and_logits(path, meta["image_size"], 7)
  for batch in (1, 7):
    out = serve(images=tf.constant(images[:batch]))
    assert relative(out["logits"], truth[:batch]) <= 1e-5
    np.testing.assert_allclose(out["probabilities"], tf.nn.softmax(truth[:batch]), atol=1e-6)
  assert meta["batch"] == "dynamic" and meta["parity"]["tolerance"] == 1e-5
  assert meta["signature"]["inputs"]["images"]["shape"][0] is None


def write_jpegs(folder, sizes):
  """Real JPEG files: smooth pictures of several sizes, one grayscale."""
  paths = []
  rng = np.random.default_rng(5)
  for i, (width, height) in enumerate(sizes):
    small = Image.fromarray(rng.integers(0, 256, (4, 4, 3), dtype=np.uint8))
    picture = small.resize((width, height), Image.BILINEAR)
    if i == 1:
      picture = picture.convert("L")
    paths.append(str(folder / f"{i}.jpg"))
    picture.save(paths[-1], quality=85)
  return paths


def test_with_preprocessing_gives_the_top_1_of_predict(checkpoints, tmp_path):
  path, _ = checkpoints["gap"]
  out = tmp_path / "out"
  export.export(path, str(out), to="saved_model", with_preprocessing=True, log=lambda _: None)
  files = write_jpegs(tmp_path, [(40, 30), (17, 23), (16, 16), (64, 48), (31, 90)])
  raw = [open(f, "rb").read() for f in files]
  logits = serving(out)(images=tf.constant(raw))["logits"].numpy()
  module, params = npz.load_npz(path)
  predicted = predict.classify(module, params, files, top_k=1)
  assert [p[0][0] for p in predicted] == list(np.argmax(logits, axis=1))
  images = np.stack([image_files.load_image(f, 16) for f in files])
  assert relative(logits, flax_logits(path, 16, images)) <= 1e-5
  meta = read_metadata(out)
  assert meta["signature"]["inputs"]["images"]["dtype"] == "string"
  assert meta["preprocessing"]["in_graph"] is True


def test_a_multi_label_head_serves_sigmoid_probabilities(checkpoints, tmp_path):
  """The serving function of a checkpoint saved by a multi-label run (not saved to disk:
  the reload path is the cases' above)."""
  from vit_jax.export import saved_model, source  # pylint: disable=import-outside-toplevel
  path, _ = checkpoints["gap"]
  _, params = npz.load_npz(path)
  multi = tmp_path / "multi.npz"
  npz.save_npz(params, str(multi), class_names=["a", "b", "c"], multi_label=True)
  loaded = source.load_source(str(multi), None, "float32")
  assert loaded.multi_label
  images, truth = noise_and_logits(path, 16, 7)
  out = saved_model.serving_module(loaded, None, False).serve(tf.constant(images))
  np.testing.assert_allclose(out["probabilities"], tf.nn.sigmoid(truth), atol=1e-6)


def test_a_naflex_classifier_takes_patches_mask_and_grid(tmp_path):
  """--max_patches: the SavedModel's signature takes NaFlex inputs; on a batch of three
  aspect ratios (three grids, padding in each row) its logits are the JAX NaFlexViT's."""
  checkpoint = naflex_checkpoint(tmp_path)
  out = str(tmp_path / "naflex")
  export.export(checkpoint, out, to="saved_model", max_patches=NAFLEX_BUDGET, log=lambda _: None)
  inputs, truth = naflex_inputs_and_logits(checkpoint)
  assert len({tuple(grid) for grid in inputs["grid"]}) == 3
  logits = serving(out)(**{k: tf.constant(v) for k, v in inputs.items()})["logits"].numpy()
  assert relative(logits, truth) <= 1e-5
  meta = read_metadata(out)
  assert meta["max_patches"] == NAFLEX_BUDGET and not meta["preprocessing"]["in_graph"]
  assert meta["signature"]["inputs"] == {
      "patches": {"shape": [None, NAFLEX_BUDGET, 48], "dtype": "float32"},
      "mask": {"shape": [None, NAFLEX_BUDGET], "dtype": "int32"},
      "grid": {"shape": [None, 2], "dtype": "int32"}}
