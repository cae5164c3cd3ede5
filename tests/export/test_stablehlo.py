"""StableHLO exports reload with jax.export.deserialize and compute the Flax logits, at any
batch size, for plain, hybrid and big_vision models."""

import functools

import jax
import numpy as np
import pytest

from export_cases import (CASES, NAFLEX_BUDGET, checkpoints,  # noqa: F401 (a fixture)
                          Exports, naflex_checkpoint, naflex_inputs_and_logits,
                          noise_and_logits, read_metadata, relative)
from vit_jax import export


@pytest.fixture(scope="module")
def exported(checkpoints, tmp_path_factory):
  return Exports("stablehlo", checkpoints, tmp_path_factory.mktemp("stablehlo"))


@functools.lru_cache(maxsize=None)
def deserialized(path):
  """The export in file `path`, deserialized once per test process: what it compiles for
  a batch size serves every test that calls it with that size."""
  with open(path, "rb") as f:
    return jax.export.deserialize(bytearray(f.read()))


@pytest.mark.parametrize("case", CASES)
def test_reloads_and_matches_flax_at_batch_1_and_7(exported, checkpoints, case):
  path, _ = checkpoints[case]
  meta = read_metadata(exported[case])
  side = meta["image_size"]
  model = deserialized(f"{exported[case]}/{meta['files']['model']}")
  images, truth = noise_and_logits(path, side, 7)
  for batch in (1, 7):
    logits = np.asarray(model.call(images[:batch]))
    assert logits.shape == (batch, meta["num_classes"])
    assert relative(logits, truth[:batch]) <= 1e-5
  assert meta["batch"] == "dynamic" and meta["parity"]["max_relative_logit_difference"] <= 1e-5
  assert {"cpu", "cuda", "tpu"} <= set(meta["signature"]["platforms"])


def test_matches_the_fixture_truth(exported, released_fixtures):
  """The export computes the reference implementation's logits, not just ours (one image
  at a time: the program for batch 1 is the one the test above compiles)."""
  model = deserialized(f"{exported['vit-ti16']}/model.stablehlo")
  truth = np.load(released_fixtures / "expected-vit-ti16-224.npz")["logits"]
  images = np.load(released_fixtures / "images-224.npy")
  logits = np.concatenate([model.call(images[i:i + 1]) for i in range(len(images))])
  assert relative(logits, truth) <= 1e-5


def test_fixed_batch_and_bfloat16(checkpoints, tmp_path):
  path, _ = checkpoints["gap"]
  result = export.export(path, str(tmp_path / "out"), to="stablehlo", batch=3,
                         dtype="bfloat16", log=lambda _: None)
  assert result.max_relative_difference <= result.tolerance
  with open(tmp_path / "out/model.stablehlo", "rb") as f:
    model = jax.export.deserialize(bytearray(f.read()))
  assert model.in_avals[0].shape == (3, 16, 16, 3)
  meta = read_metadata(tmp_path / "out")
  assert (meta["batch"], meta["compute_dtype"]) == (3, "bfloat16")


def test_a_non_square_size_is_traced_and_recorded(checkpoints, tmp_path):
  """--image_size=HxW: the model resizes the 16 px checkpoint's position embedding in the
  traced program; metadata.json records the size traced at and the checkpoint's own."""
  path, _ = checkpoints["gap"]
  export.export(path, str(tmp_path / "out"), to="stablehlo", image_size=(16, 24), batch=2,
                log=lambda _: None)
  meta = read_metadata(tmp_path / "out")
  assert meta["image_size"] == [16, 24] and meta["checkpoint_image_size"] == [16, 16]
  model = deserialized(f"{tmp_path / 'out'}/{meta['files']['model']}")
  assert model.in_avals[0].shape == (2, 16, 24, 3)
  images, truth = noise_and_logits(path, meta["image_size"], 2)  # the load-time resize
  assert relative(np.asarray(model.call(images)), truth) <= 1e-5


def test_a_naflex_classifier_is_called_with_a_dict_at_any_batch(tmp_path):
  checkpoint = naflex_checkpoint(tmp_path)
  out = str(tmp_path / "naflex")
  export.export(checkpoint, out, to="stablehlo", max_patches=NAFLEX_BUDGET, log=lambda _: None)
  inputs, truth = naflex_inputs_and_logits(checkpoint)
  model = deserialized(f"{out}/{read_metadata(out)['files']['model']}")
  for batch in (1, 3):
    logits = model.call({k: v[:batch] for k, v in inputs.items()})
    assert relative(logits, truth[:batch]) <= 1e-5
