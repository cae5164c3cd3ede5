"""The workdir's result files, and what they tell a rerun."""

import json

import ml_collections

from conftest import init_params, tiny_model
from vit_jax.base import workdir_files
from vit_jax.training.runs import outputs


def test_a_run_is_finished_only_with_both_result_files_and_the_last_step(tmp_path):
  assert outputs.finished_results(str(tmp_path), 10, 10) is None  # nothing written yet
  outputs.write_final(init_params(tiny_model()), {"eval/accuracy": 0.5}, str(tmp_path))
  assert outputs.finished_results(str(tmp_path), 10, 10) == {"eval/accuracy": 0.5}
  assert outputs.finished_results(str(tmp_path), 8, 10) is None  # asked to train on
  assert outputs.finished_results(str(tmp_path), None, 10) is None  # no checkpoint
  (tmp_path / workdir_files.PARAMS).unlink()  # killed between the last save and params.npz
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
