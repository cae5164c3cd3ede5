"""examples/nnx_digits.py (the NNX training example of docs/python_api.md) run short on 8
CPU devices, a 4 x 2 data x tensor mesh: its parameters are split as the main job splits
them, it learns, and its file is a released-layout file with the digits' class names. The
full run's accuracy: docs/python_api.md ("From Flax NNX")."""

import re
import subprocess
import sys

import jax
import jax.numpy as jnp
from flax import traverse_util

import vit_jax
from conftest import REPO
from helpers import subprocess_env
from vit_jax.training import sharding

EXAMPLE = REPO / "examples" / "nnx_digits.py"
DEMO_MODEL = dict(patch_size=4, hidden_size=64, mlp_dim=128, num_heads=4, num_layers=4)
MESH = {"data": 4, "fsdp": 1, "tensor": 2}


def test_the_nnx_example_learns_over_a_mesh_split_as_the_main_job_splits(tmp_path):
  out = tmp_path / "digits.npz"
  done = subprocess.run(
      [sys.executable, str(EXAMPLE), "--mesh=data:4,tensor:2", "--steps=25", "--batch=64",
       "--warmup=5", "--lr=3e-3", f"--out={out}"],
      env=subprocess_env(devices=8), cwd=tmp_path, capture_output=True, text=True,
      timeout=600, check=False)
  assert done.returncode == 0, done.stderr

  module = vit_jax.create_model("ViT-Ti_16", num_classes=10, **DEMO_MODEL)
  shapes = traverse_util.flatten_dict(jax.eval_shape(
      module.init, jax.random.PRNGKey(0), jnp.zeros((1, 16, 16, 3)))["params"], sep="/")
  split = [name for name, leaf in shapes.items()
           if any(sharding.partition_spec(name, leaf.shape, MESH))]
  assert 0 < len(split) < len(shapes)
  assert f"{len(split)} of {len(shapes)} parameters split" in done.stdout, done.stdout

  first, last, accuracy = map(float, re.search(
      r"first loss ([\d.]+), last loss ([\d.]+); test accuracy ([\d.]+)", done.stdout).groups())
  assert last < first - 0.2 and accuracy > 0.25, done.stdout  # chance: 0.1
  _, params = vit_jax.load_npz(str(out))
  assert traverse_util.flatten_dict(params, sep="/").keys() == shapes.keys()
  assert vit_jax.read_class_names(str(out)) == [str(d) for d in range(10)]
