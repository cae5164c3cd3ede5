"""TFLite exports (fixed batch) run in LiteRT's interpreter with the Flax logits; float16
weights halve the file within their tolerance; what TFLite cannot do is refused."""

import os

import pytest
from ai_edge_litert.interpreter import Interpreter

from export_cases import (CASES, checkpoints,  # noqa: F401 (checkpoints: a fixture)
                          Exports, leftovers, noise_and_logits, read_metadata, relative)
from vit_jax import export


@pytest.fixture(scope="module")
def exported(checkpoints, tmp_path_factory):
  return Exports("tflite", checkpoints, tmp_path_factory.mktemp("tflite"))


def logits(out, images):
  runner = Interpreter(model_path=f"{out}/model.tflite").get_signature_runner()
  return runner(images=images)["logits"]


@pytest.mark.parametrize("case", CASES)
def test_reloads_and_matches_flax(exported, checkpoints, case):
  path, _ = checkpoints[case]
  meta = read_metadata(exported[case])
  images, truth = noise_and_logits(path, meta["image_size"], 7)  # the others' truth
  assert relative(logits(exported[case], images[:1]), truth[:1]) <= 1e-4
  assert meta["batch"] == 1 and meta["parity"]["tolerance"] == 1e-4


def test_float16_weights_at_batch_7(exported, checkpoints, tmp_path):
  path, _ = checkpoints["vit-ti16"]
  out = tmp_path / "half"
  export.export(path, str(out), to="tflite", dtype="float16", batch=7, log=lambda _: None)
  images, truth = noise_and_logits(path, 224, 7)
  assert relative(logits(out, images), truth) <= 1e-2
  full = os.path.getsize(f"{exported['vit-ti16']}/model.tflite")
  assert os.path.getsize(out / "model.tflite") < 0.6 * full
  assert read_metadata(out)["signature"]["weights"] == "float16"


@pytest.mark.parametrize("options, reason", [
    (dict(batch="dynamic"), "--batch=N"), (dict(with_preprocessing=True), "Flex"),
    (dict(dtype="bfloat16"), "float16")])
def test_refused_options_name_the_reason(checkpoints, tmp_path, options, reason):
  with pytest.raises(export.ExportError, match=reason):
    export.export(checkpoints["gap"][0], str(tmp_path / "out"), to="tflite", **options)
  assert os.listdir(tmp_path) == [] and leftovers(tmp_path) == []
