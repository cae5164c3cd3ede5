"""Every command's --help exits 0 and documents its flags (vit_jax.base.cli runs them all on
absl); user errors are one line, bugs keep their traceback."""

import errno
import os
import subprocess
import sys
import textwrap
import time

import pytest

import command_runner
from conftest import REPO
from vit_jax.base import cli, errors

# command -> the start of some flags' help, as printed: `--flag: help`.
COMMANDS = {
    "vit_jax.main": ["--config: Experiment config file", "--workdir: Where checkpoints",
                     "--coordinator_address: HOST:PORT of process 0"],
    "vit_jax.predict": ["--checkpoint: A .npz / timm", "--top_k: Classes shown per image",
                        "--labels: Class names"],
    "vit_jax.visualize": ["--checkpoint: A .npz / timm", "--out: Folder for the PNG figures",
                          "--image_size: Input side in pixels"],
    "vit_jax.fewshot": ["--checkpoint: A .npz / timm", "--dataset: 'digits', an image directory",
                        "--shots: Examples per class"],
    "vit_jax.download": ["--dir: Root folder", "--[no]force: Download again",
                         "--[no]list: Print the released files that can be fetched"],
    "vit_jax.vtab": ["--checkpoint: The checkpoint to fine-tune.",
                     "--tasks: Tasks to run: VTAB task names",
                     "--workdir: Where each task's run", "--[no]lr_sweep", "--sweep_select",
                     "--config: The settings every task starts from"],
    "vit_jax.convert": ["--to: <npz|timm|hf>: Target format", "--pre_logits: <drop|pooler>",
                        "--model: Released model name"],
    "vit_jax.export": ["--to: Format: stablehlo, saved_model, tflite, onnx",
                       "--batch: Batch dimension", "--[no]with_preprocessing: saved_model",
                       "--[no]overwrite: Replace an existing OUT that is no"],
    "vit_jax.plan": ["--tpu: TPU slice to compile for", "--json: Also write the report",
                     "Exit status: 0 everything fits, 3 something does not"],
    "vit_jax.make_arrayrecord": ["--output: Folder to write the shards",
                                 "--examples_per_shard: Examples per shard"],
    "vit_jax.lora": ["python -m vit_jax.lora BASE ADAPTERS OUT",
                     "--[no]overwrite: Write into an existing folder"],
    "vit_jax.benchmark": ["--model: Model to time", "--batch: Global batch",
                          "--steps: Timed steps", "--mesh: Device mesh",
                          "--image-size: Alias for --image_size",
                          "models (--model): ViT-Ti_16, ViT-S_16"],
    "vit_jax.zeroshot": ["--checkpoint: An image-text model: a released name",
                         "--classes: Class names",
                         "--templates: Prompts with {}", "--captions: Image <-> text retrieval"],
}
# Usage mistakes -> the one line each prints: no image given; a flag that --config replaces.
USAGE_MISTAKES = {
    ("vit_jax.predict", "--checkpoint=ViT-B_16"):
        "error: give one or more images (--help shows the usage)",
    ("vit_jax.zeroshot", "--checkpoint=x.npz", "--classes=cat"):
        "error: give IMAGE files, or --folder=DIR, or --captions=FILE (one of them) (--help "
        "shows the usage)",
    ("vit_jax.benchmark", "--config=configs/demo.py", "--batch=8"):
        "error: --batch cannot go with --config, which sets the model, batch, size, dtype, mesh "
        "and fast paths: override them with --config.KEY=VALUE (--help shows the usage)",
}
# absl's other help flags, on the quickest command to start.
OTHER_HELP_FLAGS = ["-?", "--helpshort", "--helpfull", "--helpxml"]


# The commands whose --help starts without TensorFlow (only how fast the runs are depends
# on this: see tests/command_runner.py).
WITHOUT_TENSORFLOW = ("vit_jax.main", "vit_jax.download", "vit_jax.convert", "vit_jax.export",
                      "vit_jax.predict", "vit_jax.visualize", "vit_jax.lora", "vit_jax.plan",
                      "vit_jax.make_arrayrecord", "vit_jax.zeroshot")


@pytest.fixture(scope="module")
def helps():
  """(exit code, whitespace-normalised stdout and stderr) of each run: a real process for a
  usage mistake (its one line and nothing else; predict answers it before importing
  TensorFlow, whose silence test_vtab's real process checks), all others in one process
  (tests/command_runner.py: JAX and TensorFlow imported once, then one forked child per
  run, each running its command as `-m` does)."""
  runs = list(USAGE_MISTAKES)
  runs += [(command, "--help") for command in COMMANDS]
  runs += [("vit_jax.download", flag) for flag in OTHER_HELP_FLAGS]
  # PYTHONPATH: this checkout's commands (command_runner's children run from tests/, where
  # only an installed vit_jax, perhaps another checkout's, would be found).
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", JAX_PLATFORMS="cpu", PYTHONPATH=str(REPO))
  first = subprocess.Popen([sys.executable, "-m", *runs[0]], cwd=REPO, env=env, text=True,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
  light = [run for run in runs[1:] if run[0] in WITHOUT_TENSORFLOW]
  heavy = [run for run in runs[1:] if run[0] not in WITHOUT_TENSORFLOW]
  forked = command_runner.run_all(light, heavy, env=env, cwd=REPO)
  first_output = first.communicate(timeout=300)[0]
  outputs = [(first.returncode, first_output)] + forked
  return {run: (code, " ".join(output.split()))
          for run, (code, output) in zip([runs[0]] + light + heavy, outputs)}


@pytest.mark.parametrize("command", COMMANDS)
def test_help_exits_0_and_documents_the_flags(helps, command):
  code, output = helps[command, "--help"]
  assert code == 0, output
  for documented in COMMANDS[command]:
    assert documented in output


@pytest.mark.parametrize("flag", OTHER_HELP_FLAGS)
def test_every_help_flag_exits_0(helps, flag):
  code, output = helps["vit_jax.download", flag]
  assert code == 0 and "--dir" in output, output


@pytest.mark.parametrize("run", USAGE_MISTAKES, ids=lambda run: run[0])
def test_a_usage_mistake_is_one_line_not_the_help_text(helps, run):
  code, output = helps[run]
  assert code == 2
  assert output == USAGE_MISTAKES[run]


@cli.command
def raising(error):
  raise error


@pytest.mark.parametrize("error, line", [
    (errors.InvalidInput("config.batch=7 is odd:\n  use 8"), "error: config.batch=7 is odd: use 8"),
    (FileNotFoundError(errno.ENOENT, "No such file or directory", "x.npz"),
     "error: [Errno 2] No such file or directory: 'x.npz'"),
    (OSError(errno.ENOSPC, "No space left on device", "/run/params.npz"),
     "error: disk full writing /run/params.npz (No space left on device): free some space and "
     "rerun the same command; finished checkpoints are intact"),
])
def test_user_errors_end_the_command_in_one_line(capsys, error, line):
  with pytest.raises(SystemExit) as exit_info:
    raising(error)
  assert exit_info.value.code == 1
  assert capsys.readouterr().err == line + "\n"


def test_an_error_exit_does_not_wait_for_a_thread_a_library_left_waiting():
  """orbax's threads of a failed save wait minutes for a signal that never comes: the
  command still exits within seconds of its error line, its exit handlers run."""
  program = textwrap.dedent("""
      import atexit, threading
      from vit_jax.base import cli
      threading.Thread(target=threading.Event().wait, name="left waiting").start()
      atexit.register(print, "exit handlers ran")
      def main(argv):
        raise OSError("the store went away")
      cli.run(main)""")
  started = time.monotonic()
  result = subprocess.run([sys.executable, "-c", program], cwd=REPO, capture_output=True,
                          text=True, timeout=120, env=dict(os.environ, PYTHONPATH=str(REPO)))
  assert time.monotonic() - started < 60
  assert (result.returncode, result.stderr, result.stdout) == (
      1, "error: the store went away\n", "exit handlers ran\n")


@pytest.mark.parametrize("bug", [ValueError("internal"), KeyError("k"), TypeError("t")])
def test_a_bug_keeps_its_traceback(bug):
  with pytest.raises(type(bug)):
    raising(bug)


def test_list_flags_of_positive_numbers():
  assert cli.positive_numbers(["1", "5"], int, "shots") == (1, 5)
  with pytest.raises(cli.UsageError, match=r"^--lrs=0.1,x must be positive numbers, e.g. 0.01$"):
    cli.positive_numbers(["0.1", "x"], float, "lrs", example="0.01")
