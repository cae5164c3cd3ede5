"""file: URLs name local paths: --workdir=file:/path (RFC 8089's one-slash form) is
/path, not ./file:/path, and %20 is a space."""

import pytest

from helpers import demo_args, run_in_process
from vit_jax import main
from vit_jax.base import errors, file_urls
from vit_jax.training import loop


@pytest.mark.parametrize("url,path", [
    ("file:/tmp/run", "/tmp/run"), ("file:///tmp/run", "/tmp/run"),
    ("file://localhost/tmp/my%20run", "/tmp/my run"), ("FILE:/tmp/a%2Fb", "/tmp/a/b"),
    ("/tmp/run", "/tmp/run"), ("runs/file:x", "runs/file:x"), ("gs://b/run", "gs://b/run")])
def test_file_urls_are_their_local_paths(url, path):
  assert file_urls.as_local(url) == path


@pytest.mark.parametrize("url", ["file://otherhost/tmp/run", "file:relative/run"])
def test_a_file_url_of_another_machine_or_relative_is_one_line(url):
  with pytest.raises(errors.InvalidInput, match=f"^{url} is not a file URL of this machine"):
    file_urls.as_local(url)


def test_main_runs_in_the_path_a_file_url_names(tmp_path, monkeypatch):
  seen = []
  monkeypatch.setattr(loop, "train_and_evaluate", lambda config, workdir: seen.append(workdir))
  monkeypatch.chdir(tmp_path)
  done = run_in_process(main, *demo_args(), f"--workdir=file:{tmp_path}/my%20run")
  assert done.returncode == 0, done.stderr
  assert seen == [f"{tmp_path}/my run"] and not (tmp_path / "file:").exists()
