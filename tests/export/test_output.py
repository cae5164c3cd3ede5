"""The staging folder: OUT appears complete or not at all, an existing OUT survives a
failed export, and only an earlier export is replaced without overwrite."""

import os
import subprocess
import sys

import pytest

from vit_jax.base.no_clobber import OutputExistsError
from vit_jax.export import output


def test_failure_leaves_nothing_and_keeps_the_old_out(tmp_path):
  out = tmp_path / "out"
  out.mkdir()
  (out / "model").write_text("old")
  with pytest.raises(RuntimeError):
    with output.staged(str(out)) as staging:
      (tmp_path / staging / "model").write_text("half")
      raise RuntimeError("verification failed")
  assert (out / "model").read_text() == "old"
  assert sorted(os.listdir(tmp_path)) == ["out"]


def test_success_replaces_out_only_with_overwrite(tmp_path):
  out = tmp_path / "nested" / "out"
  with output.staged(str(out)) as staging:
    (tmp_path / staging / "model").write_text("new")
  assert (out / "model").read_text() == "new"
  output.check_writable(str(out), overwrite=False)  # an earlier export: replaced
  with output.staged(str(out)) as staging:
    (tmp_path / staging / "other").write_text("newer")
  assert sorted(os.listdir(out)) == [".vit_jax-output.json", "other"]
  assert sorted(os.listdir(out.parent)) == ["out"]
  (tmp_path / "theirs").mkdir()
  (tmp_path / "theirs" / "model.npz").write_text("someone's")
  with pytest.raises(OutputExistsError, match="--overwrite"):
    output.check_writable(str(tmp_path / "theirs"), overwrite=False)
  output.check_writable(str(tmp_path / "theirs"), overwrite=True)


def test_out_that_is_a_file_or_under_one(tmp_path):
  (tmp_path / "file").write_text("x")
  with pytest.raises(OutputExistsError, match="is a file"):
    output.check_writable(str(tmp_path / "file"), overwrite=True)
  with pytest.raises(OutputExistsError, match="is a file, not a folder"):
    output.check_writable(str(tmp_path / "file" / "out"), overwrite=False)


def test_a_killed_exports_staging_folders_go_on_the_next_export(tmp_path):
  """SIGKILL leaves .OUT.partial-PID-* (and .OUT.old-PID-*); a live export's stay."""
  killed = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
  killed.kill()
  killed.wait()
  for stale in (f".out.partial-{killed.pid}-abc", f".out.old-{killed.pid}-def"):
    (tmp_path / stale / "model").mkdir(parents=True)
  live = tmp_path / f".out.partial-{os.getpid()}-xyz"
  live.mkdir()
  with output.staged(str(tmp_path / "out")) as staging:
    (tmp_path / staging / "model").write_text("new")
  assert sorted(os.listdir(tmp_path)) == [live.name, "out"]
