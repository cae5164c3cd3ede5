"""The family contract is enough: a toy family defined in tests/ alone (toy_family.py, a
two-layer MLP over patches) is trained by the main job, saved and reloaded, predicted with
and planned, with no file outside tests/ knowing it."""

import json

import numpy as np
import pytest

import helpers
import toy_family
from vit_jax import load_npz, main, plan, predict, save_npz
from vit_jax.models import family_registry

CONFIG = """
from helpers import demo_config


def get_config():
  return demo_config(model_name="Toy-2", total_steps=24, eval_every=12, progress_every=4,
                     checkpoint_every=12)
"""


@pytest.fixture(name="toy_run", scope="module")
def fixture_toy_run(tmp_path_factory):
  """The registered toy family and one main-job run of it: (its config file, workdir)."""
  family_registry.register(toy_family.FAMILY)
  folder = tmp_path_factory.mktemp("toy")
  config = folder / "toy_config.py"
  config.write_text(CONFIG)
  workdir = folder / "workdir"
  done = helpers.run_in_process(main, f"--config={config}", f"--workdir={workdir}")
  assert done.returncode == 0, done.stderr[-2000:]
  yield config, workdir
  family_registry.unregister(toy_family.FAMILY.name)


def test_the_main_job_trains_a_registered_family(toy_run):
  _, workdir = toy_run
  losses = [row["train/loss"] for row in helpers.read_metrics(workdir) if "train/loss" in row]
  assert len(losses) >= 3 and losses[-1] < losses[0]  # it learns
  module, params = load_npz(str(workdir / "params.npz"))
  assert isinstance(module, toy_family.ToyMlp) and module.num_classes == 10


def test_its_file_saves_and_loads_back_bit_for_bit(toy_run, tmp_path):
  _, workdir = toy_run
  module, params = load_npz(str(workdir / "params.npz"))
  save_npz(params, tmp_path / "again.npz")
  again_module, again = load_npz(str(tmp_path / "again.npz"), num_classes=3)
  assert again_module.num_classes == 3 and not again["head"]["kernel"].any()
  np.testing.assert_array_equal(again[toy_family.EMBED]["kernel"],
                                params[toy_family.EMBED]["kernel"])
  assert family_registry.for_module(module).name == "toy"


def test_predict_classifies_with_it_and_plan_plans_it(toy_run, tmp_path):
  config, workdir = toy_run
  image = tmp_path / "digit.png"
  helpers.write_image(image, size=(32, 32))
  done = helpers.run_in_process(predict, f"--checkpoint={workdir / 'params.npz'}", image,
                                "--json=-")
  assert done.returncode == 0, done.stderr
  record, = json.loads(done.stdout)
  assert len(record["top_k"]) == 5 and record["top_k"][0]["probability"] > 0
  planned = helpers.run_in_process(plan, f"--config={config}", "--json=-")
  assert planned.returncode == 0, planned.stderr[-2000:]
  report = json.loads(planned.stdout)
  assert report["model"] == "Toy-2" and report["fits"] and report["train"]["gflop_per_image"]

