"""The Colab notebook runs top to bottom, offline, on CPU (its generated-checkpoint path)."""

import importlib.util
import os
import re
import subprocess
import sys

import nbformat
import pytest
from nbclient import NotebookClient

from conftest import REPO
from hub_server import NOTEBOOK_REPO, HubServer, tiny_repo_files, use_servers

pytestmark = pytest.mark.long  # real-process runs: start first (conftest)

NOTEBOOK = REPO / "notebooks" / "vit_jax.ipynb"


def test_notebook_runs_offline(tmp_path, monkeypatch):
  monkeypatch.setenv("VIT_JAX_OFFLINE", "1")
  monkeypatch.setenv("PYTHONPATH", str(REPO))  # the checkout under test, not an installed copy
  monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "3")
  monkeypatch.setenv("TMPDIR", str(tmp_path))
  # The notebook trains 250 steps: there optimised code pays for its longer compile
  # (conftest compiles the tests' few-step programs unoptimised).
  monkeypatch.setenv("XLA_FLAGS", " ".join(flag for flag in os.environ.get("XLA_FLAGS", "").split()
                                           if "xla_backend_optimization_level" not in flag))
  notebook = nbformat.read(NOTEBOOK, as_version=4)
  NotebookClient(notebook, timeout=600, kernel_name="python3",
                 resources={"metadata": {"path": str(tmp_path)}}).execute()
  outputs = {i: "".join(o.get("text", "") for o in cell.get("outputs", []))
             for i, cell in enumerate(notebook.cells) if cell.cell_type == "code"}
  printed = "\n".join(outputs.values())
  assert "offline" in printed and "test accuracy after 150 steps" in printed
  # Held-out digits, classified by the fine-tuned model (a random one gets ~1 of 10).
  classified = re.findall(r"true (\d), predicted (\d)", printed)
  assert [true for true, _ in classified] == [str(d) for d in range(10)]
  assert sum(true == predicted for true, predicted in classified) >= 6, printed
  assert "25-shot accuracy" in printed
  # The same file as a Flax NNX module beside the Linen one (vit_jax.nnx).
  nnx_line = re.search(r"same names and values: (\w+); largest logit difference (\S+)", printed)
  assert nnx_line and nnx_line.group(1) == "True" and float(nnx_line.group(2)) < 1e-4, printed
  # The Mixer from scratch beside it (configs/mixer_demo.py's model, 100 steps).
  mixer = re.search(r"MlpMixer: test accuracy ([\d.]+) after 100 steps; (\d+) of 10", printed)
  assert mixer and float(mixer.group(1)) >= 0.85, printed  # 0.97 measured
  images = [o for cell in notebook.cells if cell.cell_type == "code"
            for o in cell.get("outputs", []) if "image/png" in o.get("data", {})]
  assert len(images) == 4  # the four figures are displayed


def test_online_path_fetches_the_released_start_through_the_hub(tmp_path, monkeypatch):
  """The online cells (devices and network, the checkpoint) against the local Hub stand-in
  (a tiny model in the mirror's repository): is_online asks the Hub, not the closed bucket,
  and the released file arrives in checkpoints/ through its mirror. The stand-in serves
  that one repository (hub_server.build_repos's others are no part of this path)."""
  site = HubServer({NOTEBOOK_REPO: tiny_repo_files(tmp_path / "repos")})
  bucket = HubServer(forbid=True)
  try:
    use_servers(site, bucket, tmp_path, monkeypatch)
    monkeypatch.delenv("VIT_JAX_OFFLINE", raising=False)
    cells = [cell.source for cell in nbformat.read(NOTEBOOK, as_version=4).cells
             if cell.cell_type == "code"]
    namespace = {}
    for source in (cells[1], cells[2]):  # "Devices and network", "A checkpoint"
      exec(source, namespace)  # pylint: disable=exec-used
    assert namespace["ONLINE"]
    assert namespace["CHECKPOINT"] == os.path.join(
        "checkpoints", "imagenet21k+imagenet2012", "ViT-B_16.npz")
    assert namespace["module"].num_classes == 3 and bucket.requests == []
  finally:
    site.close()
    bucket.close()


def test_notebook_is_stored_without_outputs():
  """Committed clean: outputs belong to a run, not to the repository."""
  cells = nbformat.read(NOTEBOOK, as_version=4).cells
  assert all(not cell.outputs and cell.execution_count is None
             for cell in cells if cell.cell_type == "code")


def test_install_cell_installs_the_clone_or_asks_for_repo_url(tmp_path, monkeypatch):
  """No placeholder URL: inside a clone it installs the clone, elsewhere it needs REPO_URL."""
  cell = next(cell.source for cell in nbformat.read(NOTEBOOK, as_version=4).cells
              if cell.cell_type == "code" and "REPO_URL =" in cell.source)
  commands = []
  monkeypatch.setattr(subprocess, "run", lambda command, **kwargs: commands.append(command))
  monkeypatch.setattr(importlib.util, "find_spec", lambda name, *args: None)  # not installed
  monkeypatch.setattr(sys, "path", list(sys.path))
  monkeypatch.chdir(REPO / "notebooks")
  exec(cell, {})
  assert commands[-1][-2] == "-e" and commands[-1][-1].startswith(str(REPO))
  monkeypatch.chdir(tmp_path)
  with pytest.raises(RuntimeError, match="set REPO_URL in this cell"):
    exec(cell, {})
  exec(cell.replace('REPO_URL = ""', 'REPO_URL = "git+https://example.org/vit_jax"'), {})
  assert commands[-1][-1].endswith(" @ git+https://example.org/vit_jax")
