"""A model exported as the functions its family declares (vit_jax.export.functions): the
export writes whatever a family's ExportSignature says, with no family named in export/.
Here a test family's two functions (functions_family.py), each reloaded in its runtime;
its refusals and an oversized function refused in one line, OUT left as it was."""

import json

import jax
import numpy as np
import pytest

import functions_family
from vit_jax import export
from vit_jax.export import source as source_lib
from vit_jax.export.source import ExportError


@pytest.fixture(name="pair", scope="module")
def fixture_pair(tmp_path_factory):
  """A checkpoint of the registered test family."""
  functions_family.register()
  path = str(tmp_path_factory.mktemp("pair") / f"model{functions_family.SUFFIX}")
  functions_family.write_checkpoint(path)
  yield path
  functions_family.unregister()


def test_each_declared_function_is_written_and_runs_like_flax(pair, tmp_path):
  out = tmp_path / "out"
  result = export.export(pair, str(out), to="stablehlo", log=lambda _: None)
  assert list(result.differences) == ["project", "lookup"]
  assert result.summary().startswith(f"wrote {out} (stablehlo: project/, lookup/); verified "
                                     "in its runtime: max relative value difference project")
  meta = json.loads((out / "metadata.json").read_text())
  assert (meta["format"], meta["batch"], meta["model"]) == ("stablehlo", "dynamic", "pair")
  project, lookup = meta["functions"]["project"], meta["functions"]["lookup"]
  assert project["inputs"] == {"images": {"shape": [None, 2, 2, 3], "dtype": "float32"}}
  assert "preprocessing" in project and "preprocessing" not in lookup  # images only
  assert lookup["vocabulary"] == "pair.vocab" and (out / "pair.vocab").is_file()
  assert lookup["parity"]["max_relative_value_difference"] <= lookup["parity"]["tolerance"]
  assert lookup["parity"]["inputs"] == "random integers in [0, 10), seed 0"
  params = {"w": np.load(pair)["w"], "table": np.load(pair)["table"]}
  rng = np.random.default_rng(3)
  cases = {"project": (rng.uniform(-1, 1, (3, 2, 2, 3)).astype(np.float32),
                       functions_family.project),
           "lookup": (rng.integers(0, 10, (3, 5)).astype(np.int32), functions_family.lookup)}
  for name, (inputs, truth) in cases.items():  # batch 3: not the one verified
    data = (out / meta["functions"][name]["files"]["model"]).read_bytes()
    ours = jax.export.deserialize(bytearray(data)).call(inputs)
    np.testing.assert_allclose(ours, truth(params, inputs), rtol=1e-6, atol=1e-6)


def test_the_familys_refusal_is_one_export_error_before_the_load(pair, tmp_path):
  with pytest.raises(ExportError, match="^a pair of functions exports float32, not bfloat16$"):
    export.export(pair, str(tmp_path / "out"), to="stablehlo", dtype="bfloat16",
                  log=lambda _: None)
  assert not (tmp_path / "out").exists()


def test_a_function_over_one_graphs_bytes_is_refused(pair, tmp_path, monkeypatch):
  monkeypatch.setattr(source_lib, "MAX_WEIGHT_BYTES", 100)
  with pytest.raises(ExportError, match="the project's 0.0 GiB of weights do not fit one "
                                        r"serialized graph \(2 GiB\)"):
    export.export(pair, str(tmp_path / "out"), to="stablehlo", log=lambda _: None)
  assert not (tmp_path / "out").exists()
