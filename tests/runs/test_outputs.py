"""The workdir's result files, and what they tell a rerun."""

import json

import ml_collections
import pytest

from conftest import init_params, tiny_model
from vit_jax.runs import files, outputs


def test_a_run_is_finished_only_with_both_result_files_and_the_last_step(tmp_path):
  assert outputs.finished_results(str(tmp_path), 10, 10) is None  # nothing written yet
  outputs.write_final(init_params(tiny_model()), {"eval/accuracy": 0.5}, str(tmp_path))
  assert outputs.finished_results(str(tmp_path), 10, 10) == {"eval/accuracy": 0.5}
  assert outputs.finished_results(str(tmp_path), 8, 10) is None  # asked to train on
  assert outputs.finished_results(str(tmp_path), None, 10) is None  # no checkpoint
  (tmp_path / files.PARAMS).unlink()  # killed between the last save and params.npz
  assert outputs.finished_results(str(tmp_path), 10, 10) is None


def test_config_json_is_kept_and_a_changed_resume_is_written_beside_it(tmp_path, capsys):
  config = ml_collections.ConfigDict({"base_lr": 0.1, "pp": {"crop": 16}})
  outputs.save_config(config, str(tmp_path), resume_step=None)
  original = (tmp_path / "config.json").read_text()
  outputs.save_config(config, str(tmp_path), resume_step=5)  # unchanged: nothing new
  assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json"]
  config.pp.crop = 32
  outputs.save_config(config, str(tmp_path), resume_step=5)
  assert (tmp_path / "config.json").read_text() == original
  assert json.loads((tmp_path / "config.resumed-5.json").read_text())["pp"]["crop"] == 32
  assert "resuming with changed settings (pp.crop)" in capsys.readouterr().err


def finished_workdir(path):
  """A run's workdir as the main job leaves it (config.json, params.npz, metrics)."""
  outputs.save_config(ml_collections.ConfigDict({"base_lr": 0.1}), str(path), None)
  outputs.write_final(init_params(tiny_model()), {"eval/accuracy": 0.5}, str(path))
  return {p.name: p.read_bytes() for p in path.iterdir()}


def test_a_writer_claims_new_empty_or_its_own_folders_only(tmp_path):
  new = tmp_path / "new" / "deeper"
  assert outputs.claim_output_dir(str(new), "convert") == str(new)
  assert json.loads((new / outputs.MARKER).read_text()) == {"written_by": "vit_jax.convert"}
  (new / "config.json").write_text("{}")
  outputs.claim_output_dir(str(new), "convert")  # its own earlier output: accepted
  with pytest.raises(outputs.OutputExistsError, match=(
      "holds the output of vit_jax.convert: name a new folder for vit_jax.visualize, or "
      "pass --overwrite")):
    outputs.claim_output_dir(str(new), "visualize")
  (tmp_path / "empty").mkdir()
  outputs.claim_output_dir(str(tmp_path / "empty"), "visualize")

  workdir = tmp_path / "run"
  workdir.mkdir()
  before = finished_workdir(workdir)
  with pytest.raises(outputs.OutputExistsError, match=(
      r"run already holds files it did not write \(config.json, final_metrics.json, "
      r"params.npz\): name a new folder for vit_jax.convert, or pass --overwrite")):
    outputs.check_output_dir(str(workdir), "convert")
  assert {p.name: p.read_bytes() for p in workdir.iterdir()} == before
  outputs.claim_output_dir(str(workdir), "convert", overwrite=True)
  outputs.claim_output_dir(str(workdir), "convert")  # marked now


def test_destinations_under_files_and_existing_files(tmp_path):
  (tmp_path / "a_file").write_text("x")
  for claim in (outputs.claim_output_dir, outputs.claim_output_file):
    with pytest.raises(outputs.OutputExistsError, match=(
        f"cannot write {tmp_path}/a_file/sub/out: {tmp_path}/a_file is a file, not a folder")):
      claim(str(tmp_path / "a_file" / "sub" / "out"), "fewshot")
  with pytest.raises(outputs.OutputExistsError, match="a_file is a file, not a folder: name"):
    outputs.claim_output_dir(str(tmp_path / "a_file"), "visualize", overwrite=True)
  with pytest.raises(outputs.OutputExistsError, match=(
      "a_file already exists and vit_jax.fewshot did not write it: name a new file, or pass "
      "--overwrite")):
    outputs.claim_output_file(str(tmp_path / "a_file"), "fewshot")
  outputs.claim_output_file(str(tmp_path / "a_file"), "fewshot", overwrite=True)
  ours = tmp_path / "report.json"
  ours.write_text(json.dumps({**outputs.written_by("fewshot"), "top1": 0.5}))
  outputs.claim_output_file(str(ours), "fewshot")
  with pytest.raises(outputs.OutputExistsError, match="vit_jax.vtab did not write it"):
    outputs.claim_output_file(str(ours), "vtab")
  with pytest.raises(outputs.OutputExistsError, match="is a folder, not a file"):
    outputs.claim_output_file(str(tmp_path), "fewshot", overwrite=True)
