"""ONNX exports (jax2onnx) run in onnxruntime with the Flax logits at any batch size."""

import sys

import onnx
import onnxruntime
import pytest

from export_cases import (CASES, checkpoints,  # noqa: F401 (checkpoints: a fixture)
                          Exports, noise_and_logits, read_metadata, relative)


@pytest.fixture(scope="module")
def exported(checkpoints, tmp_path_factory):
  return Exports("onnx", checkpoints, tmp_path_factory.mktemp("onnx"))


@pytest.mark.parametrize("case", CASES)
def test_reloads_and_matches_flax_at_batch_1_and_7(exported, checkpoints, case):
  path, _ = checkpoints[case]
  meta = read_metadata(exported[case])
  session = onnxruntime.InferenceSession(f"{exported[case]}/model.onnx",
                                         providers=["CPUExecutionProvider"])
  images, truth = noise_and_logits(path, meta["image_size"], 7)
  for batch in (1, 7):
    logits, probabilities = session.run(["logits", "probabilities"],
                                        {"images": images[:batch]})
    assert relative(logits, truth[:batch]) <= 1e-4
    assert abs(probabilities.sum(axis=1) - 1).max() < 1e-5
  model = onnx.load(f"{exported[case]}/model.onnx")
  assert model.opset_import[0].version == meta["signature"]["opset"] == 21
  batch_dim = model.graph.input[0].type.tensor_type.shape.dim[0]
  assert batch_dim.dim_param and not batch_dim.dim_value  # symbolic
  assert meta["parity"]["max_relative_logit_difference"] <= 1e-4


def test_only_the_jax_and_flax_plugins_are_imported(exported):
  """jax2onnx's plugins for other libraries cost seconds to import and a ViT needs none."""
  assert exported["gap"]
  loaded = {name.split(".")[2] for name in sys.modules if name.startswith("jax2onnx.plugins.")}
  assert {"jax", "flax"} <= loaded and not loaded & {"equinox", "dm_pix", "examples"}, loaded
