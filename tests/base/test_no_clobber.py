"""The no-clobber rule: what a command may write into, refused in one line otherwise."""

import json

import ml_collections
import pytest

from conftest import init_params, tiny_model
from vit_jax.base import no_clobber
from vit_jax.training.runs import outputs


def finished_workdir(path):
  """A run's workdir as the main job leaves it (config.json, params.npz, metrics)."""
  outputs.save_config(ml_collections.ConfigDict({"base_lr": 0.1}), str(path), None)
  outputs.write_final(init_params(tiny_model()), {"eval/accuracy": 0.5}, str(path))
  return {p.name: p.read_bytes() for p in path.iterdir()}


def test_a_writer_claims_new_empty_or_its_own_folders_only(tmp_path):
  new = tmp_path / "new" / "deeper"
  assert no_clobber.claim_output_dir(str(new), "convert") == str(new)
  assert json.loads((new / no_clobber.MARKER).read_text()) == {"written_by": "vit_jax.convert"}
  (new / "config.json").write_text("{}")
  no_clobber.claim_output_dir(str(new), "convert")  # its own earlier output: accepted
  with pytest.raises(no_clobber.OutputExistsError, match=(
      "holds the output of vit_jax.convert: name a new folder for vit_jax.visualize, or "
      "pass --overwrite")):
    no_clobber.claim_output_dir(str(new), "visualize")
  (tmp_path / "empty").mkdir()
  no_clobber.claim_output_dir(str(tmp_path / "empty"), "visualize")

  workdir = tmp_path / "run"
  workdir.mkdir()
  before = finished_workdir(workdir)
  with pytest.raises(no_clobber.OutputExistsError, match=(
      r"run already holds files it did not write \(config.json, final_metrics.json, "
      r"params.npz\): name a new folder for vit_jax.convert, or pass --overwrite")):
    no_clobber.check_output_dir(str(workdir), "convert")
  assert {p.name: p.read_bytes() for p in workdir.iterdir()} == before
  no_clobber.claim_output_dir(str(workdir), "convert", overwrite=True)
  no_clobber.claim_output_dir(str(workdir), "convert")  # marked now


def test_destinations_under_files_and_existing_files(tmp_path):
  (tmp_path / "a_file").write_text("x")
  for claim in (no_clobber.claim_output_dir, no_clobber.claim_output_file):
    with pytest.raises(no_clobber.OutputExistsError, match=(
        f"cannot write {tmp_path}/a_file/sub/out: {tmp_path}/a_file is a file, not a folder")):
      claim(str(tmp_path / "a_file" / "sub" / "out"), "fewshot")
  with pytest.raises(no_clobber.OutputExistsError, match="a_file is a file, not a folder: name"):
    no_clobber.claim_output_dir(str(tmp_path / "a_file"), "visualize", overwrite=True)
  with pytest.raises(no_clobber.OutputExistsError, match=(
      "a_file already exists and vit_jax.fewshot did not write it: name a new file, or pass "
      "--overwrite")):
    no_clobber.claim_output_file(str(tmp_path / "a_file"), "fewshot")
  no_clobber.claim_output_file(str(tmp_path / "a_file"), "fewshot", overwrite=True)
  ours = tmp_path / "report.json"
  ours.write_text(json.dumps({**no_clobber.written_by("fewshot"), "top1": 0.5}))
  no_clobber.claim_output_file(str(ours), "fewshot")
  with pytest.raises(no_clobber.OutputExistsError, match="vit_jax.vtab did not write it"):
    no_clobber.claim_output_file(str(ours), "vtab")
  with pytest.raises(no_clobber.OutputExistsError, match="is a folder, not a file"):
    no_clobber.claim_output_file(str(tmp_path), "fewshot", overwrite=True)


def test_a_dash_is_standard_output_for_text_and_refused_for_binary_outputs(tmp_path, capsys,
                                                                         monkeypatch):
  monkeypatch.chdir(tmp_path)
  no_clobber.claim_output_file("-", "predict", stdout_ok=True)
  no_clobber.write_text("-", "[1]\n")
  assert capsys.readouterr().out == "[1]\n" and not (tmp_path / "-").exists()
  with pytest.raises(ValueError, match="'-' would be standard output, where vit_jax.lora "
                     "cannot write its binary output: name a file"):
    no_clobber.claim_output_file("-", "lora")


def test_a_list_of_records_is_its_writers_own_and_nothing_else(tmp_path):
  """predict's and zeroshot's --json are lists (no room for a stamp): a rerun replaces its
  own list of records; other JSON lists, objects and text are still refused."""
  out = tmp_path / "out.json"
  owns = no_clobber.records_with("path", "top_k")
  out.write_text(json.dumps([{"path": "a.jpg", "top_k": [], "scores": [0.5]}], indent=1))
  no_clobber.claim_output_file(str(out), "zeroshot", owns=owns)
  with pytest.raises(no_clobber.OutputExistsError, match="vit_jax.zeroshot did not write it"):
    no_clobber.claim_output_file(str(out), "zeroshot")  # without the shape: refused as before
  for foreign in ("[1, 2]", "[]", '[{"path": "a.jpg"}]', '{"path": "a.jpg", "top_k": []}',
                  "not json"):
    out.write_text(foreign)
    with pytest.raises(no_clobber.OutputExistsError, match="did not write it"):
      no_clobber.claim_output_file(str(out), "zeroshot", owns=owns)
