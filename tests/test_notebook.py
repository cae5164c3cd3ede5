"""The Colab notebook runs top to bottom, offline, on CPU (its generated-checkpoint path)."""

import nbformat
from nbclient import NotebookClient

from conftest import REPO

NOTEBOOK = REPO / "notebooks" / "vit_jax.ipynb"


def test_notebook_runs_offline(tmp_path, monkeypatch):
  monkeypatch.setenv("VIT_JAX_OFFLINE", "1")
  monkeypatch.setenv("PYTHONPATH", str(REPO))  # the checkout under test, not an installed copy
  monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "3")
  monkeypatch.setenv("TMPDIR", str(tmp_path))
  notebook = nbformat.read(NOTEBOOK, as_version=4)
  NotebookClient(notebook, timeout=600, kernel_name="python3",
                 resources={"metadata": {"path": str(tmp_path)}}).execute()
  outputs = {i: "".join(o.get("text", "") for o in cell.get("outputs", []))
             for i, cell in enumerate(notebook.cells) if cell.cell_type == "code"}
  printed = "\n".join(outputs.values())
  assert "offline" in printed and "test accuracy after 100 steps" in printed
  assert "25-shot accuracy" in printed
  images = [o for cell in notebook.cells if cell.cell_type == "code"
            for o in cell.get("outputs", []) if "image/png" in o.get("data", {})]
  assert len(images) == 4  # the four figures are displayed


def test_notebook_is_stored_without_outputs():
  """Committed clean: outputs belong to a run, not to the repository."""
  cells = nbformat.read(NOTEBOOK, as_version=4).cells
  assert all(not cell.outputs and cell.execution_count is None
             for cell in cells if cell.cell_type == "code")
