"""The two-tower notebook runs top to bottom offline on CPU (its tiny random-model path):
embeddings, zero-shot scores and the similarity matrix drawn."""

import nbformat
import pytest
from conftest import REPO
from nbclient import NotebookClient

pytestmark = pytest.mark.long  # a real kernel: start first (conftest)

NOTEBOOK = REPO / "notebooks" / "two_towers.ipynb"


def test_two_tower_notebook_runs_offline(tmp_path, monkeypatch):
  monkeypatch.setenv("VIT_JAX_OFFLINE", "1")
  monkeypatch.setenv("PYTHONPATH", str(REPO))
  monkeypatch.setenv("TMPDIR", str(tmp_path))
  notebook = nbformat.read(NOTEBOOK, as_version=4)
  NotebookClient(notebook, timeout=300, kernel_name="python3",
                 resources={"metadata": {"path": str(tmp_path)}}).execute()
  printed = "\n".join("".join(o.get("text", "") for o in cell.get("outputs", []))
                      for cell in notebook.cells if cell.cell_type == "code")
  assert "offline: a tiny random model | siglip | text length 16 | image size 32" in printed
  assert "image embeddings (3, 32) text embeddings (4, 32)" in printed
  assert printed.count("-> 'a photo of a") == 3 and "a sigmoid per text" in printed
  images = [o for cell in notebook.cells if cell.cell_type == "code"
            for o in cell.get("outputs", []) if "image/png" in o.get("data", {})]
  assert len(images) == 1


def test_stored_without_outputs():
  cells = nbformat.read(NOTEBOOK, as_version=4).cells
  assert all(not cell.outputs and cell.execution_count is None
             for cell in cells if cell.cell_type == "code")
