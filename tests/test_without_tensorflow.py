"""An install without TensorFlow: with it (and TFDS) unimportable, the demo trains through
the Grain loader (checkpoints, TensorBoard events, params.npz, the summary), predict
classifies with its params.npz, plan plans the config and make_arrayrecord writes shards,
in one real process; the requirements file of that install is setup.py's."""

import ast
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

from conftest import REPO
from helpers import CONFIG_DIR, DEMO_SETTINGS, subprocess_env, write_image

pytestmark = pytest.mark.long  # a real process: start first (conftest)


def test_grain_run_predict_and_plan_never_import_tensorflow(tmp_path):
  workdir, image = tmp_path / "run", tmp_path / "seven.png"
  Image.fromarray(np.full((8, 8, 3), 200, np.uint8)).save(image)
  for split in ("train", "test"):
    write_image(str(tmp_path / "folder" / split / "a" / "0.png"))
  settings = [f"--config.{key}={value}" for key, value in DEMO_SETTINGS.items()]
  demo = f"--config={CONFIG_DIR / 'demo.py'}"
  done = subprocess.run(
      [sys.executable, str(REPO / "tests" / "without_tensorflow.py"),
       "vit_jax.main", demo, "--config.loader=grain", *settings, f"--workdir={workdir}",
       "--then", "vit_jax.predict", f"--checkpoint={workdir / 'params.npz'}",
       f"--json={tmp_path / 'predictions.json'}", str(image),
       "--then", "vit_jax.plan", demo, "--config.loader=grain",
       "--then", "vit_jax.make_arrayrecord", str(tmp_path / "folder"),
       f"--output={tmp_path / 'shards'}"],
      env=subprocess_env(), cwd=tmp_path, capture_output=True, text=True, timeout=300)
  assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
  assert done.stdout.strip().endswith("tensorflow imported: False")
  final = json.loads((workdir / "final_metrics.json").read_text())
  assert final["eval/examples"] == 300
  names = os.listdir(workdir)
  assert "params.npz" in names and any(n.startswith("events.out.tfevents") for n in names)
  assert sorted(os.listdir(workdir / "checkpoints"))[:2] == ["3", "6"]
  predictions = json.loads((tmp_path / "predictions.json").read_text())
  assert len(predictions) == 1
  assert "memory per device" in done.stdout + done.stderr
  assert "arrayrecord.json" in os.listdir(tmp_path / "shards")


def test_the_requirements_file_is_setup_pys_core():
  values = {}
  for node in ast.parse((REPO / "setup.py").read_text()).body:
    if isinstance(node, ast.Assign) and node.targets[0].id in ("JAX_VERSIONS", "CORE_REQUIRES"):
      exec(compile(ast.Module([node], []), "setup.py", "exec"), values)  # pylint: disable=exec-used
  lines = (REPO / "requirements-without-tensorflow.txt").read_text().splitlines()
  assert [line for line in lines if line and not line.startswith("#")] == values["CORE_REQUIRES"]
  assert not any(name.startswith("tensorflow") and not name.startswith("tensorflow-datasets")
                 for name in values["CORE_REQUIRES"])
