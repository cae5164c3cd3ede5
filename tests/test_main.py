"""The command line: one `error:` line for mistakes, and a short real run on each mesh.

Mistakes that flag parsing catches each run the command as its own process (forked from one
that imported JAX once: tests/command_runner.py). The runs that get past it share one
process with 8 devices (each process start costs seconds): its first run is a refused one,
which must print one line and nothing else, so nothing the process prints while it starts
can pass unseen."""

import json
import os
import subprocess

import pytest

import command_runner
from conftest import REPO
from helpers import (assert_params_close, demo_args, load_params, one_process_command,
                     run_in_process, split_runs, subprocess_env)

pytestmark = pytest.mark.long  # real-process runs: start first (conftest)

DEMO_CONFIG = "--config=configs/demo.py"
# The shared demo run (helpers.DEMO_SETTINGS), evaluated and saved once, at its end.
AT_THE_END = dict(eval_every=6, checkpoint_every=6)
MESHES = {"data8": [], "data4_fsdp2": ["--config.mesh.data=4", "--config.mesh.fsdp=2"],
          "data2_tensor4": ["--config.mesh.data=2", "--config.mesh.tensor=4"]}
# The runs of the shared process, in order: name -> flags (all but --workdir).
RUNS = {"negative_steps": [DEMO_CONFIG, "--config.total_steps=-5"],
        "missing_pretrained": [DEMO_CONFIG, "--config.pretrained=/no/such.npz"],
        "file_workdir": [DEMO_CONFIG],
        "tensor8": [DEMO_CONFIG, "--config.mesh.data=1", "--config.mesh.tensor=8"],
        "batch12": [DEMO_CONFIG, "--config.batch=12"],
        **{name: [*demo_args(**AT_THE_END), *mesh] for name, mesh in MESHES.items()}}


# Mistakes that flag parsing catches: name -> flags (all but --workdir).
USAGE_MISTAKES = {
    "config_key_typo": [DEMO_CONFIG, "--config.bacth=3"],
    "dataset_override": ["--config=configs/demo.py:digits", "--config.dataset=/data/pets"],
    "pretrain_without_dataset": ["--config=configs/pretrain.py:ViT-B_16"],
}


@pytest.fixture(name="usage_mistakes", scope="module")
def fixture_usage_mistakes(tmp_path_factory):
  """USAGE_MISTAKES, each `python -m vit_jax.main` in its own process: one process imports
  JAX once and forks one child per command line, which runs the command as `-m` does
  (tests/command_runner.py); what a fresh process prints as it starts: the `runs` fixture.
  name -> (exit code, its stdout and stderr together, its --workdir)."""
  root = tmp_path_factory.mktemp("usage")
  for name in USAGE_MISTAKES:
    (root / name).mkdir()
  # The typo's an existing, empty folder; the others' a folder they must not create.
  workdirs = {name: root / name / ("" if name == "config_key_typo" else "run")
              for name in USAGE_MISTAKES}
  done = command_runner.run_all([["vit_jax.main", *args, f"--workdir={workdirs[name]}"]
                                 for name, args in USAGE_MISTAKES.items()], [],
                                env=subprocess_env(devices=1), cwd=REPO)
  return {name: (code, output, workdirs[name])
          for name, (code, output) in zip(USAGE_MISTAKES, done)}


def test_config_key_typo(usage_mistakes):
  code, output, _ = usage_mistakes["config_key_typo"]
  assert code == 2
  assert [line for line in output.splitlines() if line.startswith("error:")] == [
      "error: bad flag or config override: no config key 'bacth' Did you mean \"batch\" "
      "instead of \"bacth\"?"]
  assert "Traceback" not in output


@pytest.fixture(name="runs", scope="module")
def fixture_runs(tmp_path_factory):
  """RUNS, one after another in one process with 8 devices (helpers.run_in_one_process):
  name -> (exit code, what the run printed, its workdir)."""
  root = tmp_path_factory.mktemp("runs")
  workdirs = {name: root / name for name in RUNS}
  workdirs["file_workdir"].write_text("data")
  workdirs["batch12"].mkdir()  # an existing, empty workdir: a refused run adds nothing
  done = subprocess.run(one_process_command("vit_jax.main", [
      [*args, f"--workdir={workdirs[name]}"] for name, args in RUNS.items()]), cwd=REPO,
                        env=subprocess_env(8), capture_output=True, text=True, timeout=600)
  ended = split_runs(done.stderr)
  assert done.returncode == 0 and len(ended) == len(RUNS), done.stderr[-3000:]
  return {name: (code, printed, workdirs[name])
          for name, (code, _, printed) in zip(RUNS, ended)}


def error_line(runs, name):
  """The one `error:` line of a run that failed with exit code 1."""
  code, printed, _ = runs[name]
  assert code == 1, printed[-2000:]
  [line] = [line for line in printed.splitlines() if line.startswith("error:")]
  return line


def test_tensor_axis_must_divide_the_heads(runs):
  assert "mesh tensor=8 does not divide the model's 4 heads" in error_line(runs, "tensor8")


def test_batch_not_divisible_by_devices(runs):
  assert ("config.batch=12 is not divisible by the 8 data-parallel devices"
          in error_line(runs, "batch12"))
  assert os.listdir(runs["batch12"][2]) == []


@pytest.mark.parametrize("mesh", MESHES)
def test_short_demo_run_on_8_devices(runs, demo_run, mesh):
  code, stderr, workdir = runs[mesh]
  assert code == 0, stderr[-2000:]
  assert "img/s/device" in stderr and "ETA" in stderr
  final = json.loads((workdir / "final_metrics.json").read_text())
  assert final["eval/examples"] == 300
  # The console: what a user needs, no library chatter, and a summary naming the outputs.
  for noise in ("checkpoint_manager", "Unable to initialize backend", "oneDNN", "Total:",
                "Hyperparameters"):
    assert noise not in stderr, noise
  assert len(stderr.splitlines()) < 20, stderr
  summary = stderr[stderr.index("done: trained steps 1-6 of 6"):]
  assert f"eval accuracy {final['eval/accuracy']:.4f}" in summary
  for path in ("params.npz", "metrics.jsonl", "checkpoints"):
    assert str(workdir / path) in summary
  assert f"tensorboard --logdir={workdir}" in summary
  # The mesh trains what one device trains (conftest's demo run; two processes of 4 devices:
  # test_multiprocess).
  assert_params_close(load_params(workdir), load_params(demo_run[0]))


@pytest.mark.parametrize("run, message", [
    ("negative_steps", "error: config.total_steps=-5 must be >= 1"),
    ("missing_pretrained", "error: config.pretrained=/no/such.npz"),
], ids=["negative_steps", "missing_pretrained"])
def test_refused_runs_write_nothing_and_print_one_line(runs, run, message):
  code, printed, workdir = runs[run]
  assert code == 1
  assert printed.strip().startswith(message) and len(printed.splitlines()) == 1, printed
  assert not workdir.exists()


@pytest.mark.parametrize("run, message", [
    ("dataset_override",
     "error: --config.dataset=/data/pets would keep the splits, steps, crop and eval sets "
     "configs/demo.py chose for its own dataset; pass the dataset after the colon instead: "
     "--config=configs/demo.py:/data/pets (--help shows the usage)"),
    ("pretrain_without_dataset",
     "error: cannot load --config: configs/pretrain.py takes MODEL,DATASET (e.g. "
     "--config=configs/pretrain.py:ViT-B_16,imagenet21k), got 'ViT-B_16'; MODEL is one of "
     "ViT-Ti_16, "),
], ids=["dataset_override", "pretrain_without_dataset"])
def test_config_arguments_are_one_usage_line(usage_mistakes, run, message):
  code, output, workdir = usage_mistakes[run]
  assert code == 2 and len(output.splitlines()) == 1, output
  assert output.startswith(message)
  assert not workdir.exists()


def test_a_file_as_workdir_is_one_line(runs):
  workdir = runs["file_workdir"][2]
  assert error_line(runs, "file_workdir") == (
      f"error: --workdir={workdir} is a file, not a directory: pass a directory path (it is "
      "created if missing)")
  assert workdir.read_text() == "data"


def test_a_budget_that_does_not_fit_memory_is_one_line_naming_the_plan(tmp_path):
  """A real out-of-memory at the first step through the command (a NaFlex budget whose
  attention asks the CPU for 2^48 bytes: past a 47-bit address space, refused at allocation
  however the OS overcommits): one line naming the sizes to lower and the plan command with
  this run's flags. In process: ~3 s from a warm compile cache."""
  from vit_jax import main  # pylint: disable=import-outside-toplevel
  flags = ["--config=configs/naflex_demo.py", "--config.pp.max_patches=262144",
           "--config.model.num_heads=256", "--config.model.hidden_size=256",
           "--config.model.num_layers=1", "--config.batch=1", "--config.batch_eval=1",
           "--config.total_steps=1", "--config.warmup_steps=0"]
  done = run_in_process(main, *flags, f"--workdir={tmp_path / 'run'}")
  assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-3000:]
  [line] = [line for line in done.stderr.splitlines() if line.startswith("error:")]
  assert line.startswith("error: the train step does not fit device memory with config.batch=1, "
                         "config.pp.max_patches=262144 on ")
  assert "(RESOURCE_EXHAUSTED: Out of memory allocating " in line
  assert line.endswith("): pass a smaller --config.pp.max_patches or --config.batch; python -m "
                       f"vit_jax.plan {' '.join(flags)} says what fits")
