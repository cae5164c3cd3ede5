"""Helpers shared by several test modules: small configs, generated image folders and
files, metrics readers (pytest fixtures live in conftest.py)."""

import contextlib
import importlib.util
import io
import json
import os
import pathlib
import signal
import socket
import subprocess
import sys
import time

import gc_tuning
import ml_collections
import numpy as np
from PIL import Image

REPO = pathlib.Path(__file__).resolve().parents[1]
CONFIG_DIR = REPO / "configs"


def load_module(file):
  """configs/FILE as a module, loaded by path like config_flags does (not a package)."""
  module_spec = importlib.util.spec_from_file_location("config_under_test", CONFIG_DIR / file)
  module = importlib.util.module_from_spec(module_spec)
  module_spec.loader.exec_module(module)
  return module


demo = load_module("demo.py")  # configs/ holds files loaded by path, not a package




# The short demo run that most main-job tests make, in process (demo_config) or as a
# command (demo_args): programs compiled for the same settings (and device count) are
# shared between tests, workers and processes through the persistent XLA cache, so a
# test that can use these settings (overriding only what does not change a compiled
# program, such as eval_every or progress_every) pays no compile of its own.
DEMO_SETTINGS = dict(total_steps=6, batch=32, batch_eval=128, progress_every=2, eval_every=3,
                     checkpoint_every=3, warmup_steps=2)


def demo_config(**overrides):
  config = demo.get_config()
  config.update({**DEMO_SETTINGS, **overrides})
  config.lock()
  return config


def demo_args(**overrides):
  """`python -m vit_jax.main` flags for the same run as demo_config(**overrides), from any
  working directory."""
  return [f"--config={CONFIG_DIR / 'demo.py'}"] + [
      f"--config.{key}={value}" for key, value in {**DEMO_SETTINGS, **overrides}.items()]


# configs/siglip_demo.py's recipe on towers as small as compile in seconds (one block each,
# 32 wide, the text head as wide): what the plan and benchmark tests of an image-text pair run.
TINY_PAIR = {"model.num_layers": 1, "model.hidden_size": 32, "model.mlp_dim": 64,
             "model.num_heads": 2, "text.width": 32, "text.depth": 1, "text.mlp_dim": 64,
             "text.num_heads": 2, "text.length": 8, "contrastive.out_dim": (None, 32),
             "batch": 64, "batch_eval": 64}


def pair_config(**overrides):
  """configs/siglip_demo.py with TINY_PAIR and `overrides` ('a.b' keys)."""
  config = load_module("siglip_demo.py").get_config()
  for key, value in {**TINY_PAIR, **overrides}.items():
    *parents, leaf = key.split(".")
    node = config
    for parent in parents:
      node = node[parent]
    node[leaf] = value
  return config


def pair_args(**overrides):
  """The command-line flags of pair_config(**overrides)."""
  return [f"--config={CONFIG_DIR / 'siglip_demo.py'}"] + [
      f"--config.{key}={value}" for key, value in {**TINY_PAIR, **overrides}.items()]


def free_port() -> int:
  """A TCP port nothing listens on now (for a coordinator of several processes)."""
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def subprocess_env(devices=None, **extra):
  """The environment of a command a test starts: this checkout's code, TensorFlow quiet,
  the test XLA flags set in conftest, and `devices` CPU devices when given."""
  env = {**os.environ, "PYTHONPATH": str(REPO), "TF_CPP_MIN_LOG_LEVEL": "3", **extra}
  if devices:
    flags = [flag for flag in os.environ.get("XLA_FLAGS", "").split()
             if not flag.startswith("--xla_force_host_platform_device_count")]
    env["XLA_FLAGS"] = " ".join(flags + [f"--xla_force_host_platform_device_count={devices}"])
  return env


def parsed_config(monkeypatch, config_file: str, *overrides):
  """configs/CONFIG_FILE with --config.KEY overrides parsed as the main job's command line
  parses them (ml_collections' config flag, vit_jax.base.cli), from the repository root."""
  from absl import flags  # pylint: disable=import-outside-toplevel

  from vit_jax import main  # pylint: disable=import-outside-toplevel
  from vit_jax.base import cli  # pylint: disable=import-outside-toplevel
  argv = ["vit_jax.main", f"--config={CONFIG_DIR / config_file}", "--workdir=unused",
          *overrides]
  monkeypatch.setattr(sys, "argv", argv)
  values = flags.FlagValues()
  main.define_flags(values)
  values(argv)
  return cli.load_config(values)


def exit_code_in_process(command, *args) -> int:
  """`python -m <command> ARGS` in this process (`command`: the module with main and
  define_flags), parsed and ended by vit_jax.base.cli as cli.run does: a usage mistake exits 2, a
  user error 1, each with one `error:` line, Ctrl-C 130; a bug raises here. Its flags live on
  their own FlagValues (config_flags defines a --config.KEY flag for each override in
  sys.argv, so ARGS stand in sys.argv meanwhile). Its output goes where this process's
  goes; returns the exit status."""
  from absl import flags  # pylint: disable=import-outside-toplevel

  from vit_jax.base import cli  # pylint: disable=import-outside-toplevel
  argv = [command.__name__, *map(str, args)]
  flag_values = flags.FlagValues()
  saved_argv, sys.argv = sys.argv, argv
  try:
    cli.define_or_exit(command.define_flags, flag_values)
    cli.with_exit_codes(command.main)(cli.parse_flags(argv, flag_values), flag_values)
    return 0
  except SystemExit as e:
    return e.code
  finally:
    sys.argv = saved_argv


def run_in_process(command, *args) -> subprocess.CompletedProcess:
  """exit_code_in_process with the command's stdout and stderr caught, as a process's.
  Seconds cheaper than a process; keep one real process per command line."""
  stdout, stderr = io.StringIO(), io.StringIO()
  with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
    code = exit_code_in_process(command, *args)
  return subprocess.CompletedProcess([command.__name__, *map(str, args)], code,
                                     stdout.getvalue(), stderr.getvalue())


RUN_END = "== exit "  # what run_in_one_process writes after each run


def run_in_one_process(module_name, runs):
  """Runs `python -m MODULE ARGS` for each ARGS in `runs`, one after another in this process,
  set up as cli.run sets up a command (third-party logging quiet); after each run writes
  `== exit CODE; checkpoints: NAMES` (what its --workdir's checkpoints/ holds) on stderr.
  One process start (seconds: TensorFlow, jax) then serves several runs of a command."""
  from vit_jax.base import cli  # pylint: disable=import-outside-toplevel
  command = importlib.import_module(module_name)
  gc_tuning.fewer_collections()

  def run_all(argv):
    del argv
    for args in runs:
      code = exit_code_in_process(command, *args)
      workdir = [arg.split("=", 1)[1] for arg in args if arg.startswith("--workdir=")][-1]
      checkpoints = os.path.join(workdir, "checkpoints")
      names = sorted(os.listdir(checkpoints), key=lambda name: (len(name), name)) if (
          os.path.isdir(checkpoints)) else []
      print(f"{RUN_END}{code}; checkpoints: {' '.join(names)}", file=sys.stderr, flush=True)
  sys.argv = sys.argv[:1]  # the runs' flags are their own
  cli.run(run_all)


def one_process_command(module_name, runs):
  """The command line of a process that runs `runs` (see run_in_one_process)."""
  return [sys.executable, __file__, module_name, json.dumps(runs)]


def split_runs(output):
  """run_in_one_process's output -> [(exit code, checkpoint names, the run's own output)];
  the first run's output starts with what the process printed while it started."""
  results, lines = [], []
  for line in output.splitlines(keepends=True):
    if line.startswith(RUN_END):
      code, names = line[len(RUN_END):].split("; checkpoints:")
      results.append((int(code), names.split(), "".join(lines)))
      lines = []
    else:
      lines.append(line)
  return results


def sigterm_at_step(step):
  """A vit_jax.data.device_batches.prefetch_to_device (patch it in) that sends this process
  a real SIGTERM before the train loop's batch `step`: the run saves that step and stops,
  as a preempted job does. The train loop's stream is the first a run makes; the streams
  of evaluators (few-shot features) come later and pass unchanged."""
  from vit_jax.data import device_batches  # pylint: disable=import-outside-toplevel
  original = device_batches.prefetch_to_device
  streams = []

  def with_sigterm(batches):
    try:
      for i, batch in enumerate(batches, start=1):
        if i == step:
          os.kill(os.getpid(), signal.SIGTERM)
        yield batch
    finally:
      batches.close()

  def prefetch(iterator, sharding, size=2):
    streams.append(original(iterator, sharding, size))
    return with_sigterm(streams[0]) if len(streams) == 1 else streams[-1]
  return prefetch


def wait_for(predicate, process=None, timeout=240, details=lambda: ""):
  """Polls `predicate` until it holds: a running job's progress shows only in its files.
  Fails once `timeout` seconds pass, or at once when `process` (if given) has ended first,
  with details() (e.g. the job's output) in the message."""
  deadline = time.monotonic() + timeout
  while not predicate():
    ended = process is not None and process.poll() is not None
    assert not ended and time.monotonic() < deadline, (
        f"{'the job ended' if ended else f'not reached in {timeout} s'}: {details()}")
    time.sleep(0.2)


def read_metrics(workdir):
  """The run's metrics.jsonl rows, through the package's one reader."""
  from vit_jax.training.runs import metrics  # pylint: disable=import-outside-toplevel
  return metrics.read_rows(str(workdir))


def load_params(workdir):
  """The run's params.npz as {flattened name: array}."""
  with np.load(os.path.join(workdir, "params.npz")) as f:
    return {k: f[k] for k in f.files}


def assert_params_close(ours, reference):
  """Two runs of one job on other device layouts or processes: <= 1e-4 relative; the
  absolute floor covers the key biases, whose gradient is zero in exact arithmetic
  (softmax ignores them), so they hold only float noise."""
  for key, value in reference.items():
    np.testing.assert_allclose(ours[key], value, rtol=1e-4, atol=1e-5, err_msg=key)


def make_config(dataset="digits", **pp) -> ml_collections.ConfigDict:
  """The keys open_dataset reads; small BiT crops keep the tests fast."""
  return ml_collections.ConfigDict({
      "dataset": dataset, "train_split": None, "eval_split": None, "tfds_data_dir": None,
      "tfds_manual_dir": None, "tfds_download": False, "shuffle_buffer": 16,
      "pp": {"preset": "bit", "crop": 16, "resize": 20, "flip": True, "mixup_alpha": 0.0,
             **pp}})


def train(dataset, process_count=1, process_index=0, start_step=0, num_steps=4, batch_size=8):
  return list(dataset.train_batches(batch_size=batch_size, start_step=start_step,
                                    num_steps=num_steps, seed=3, process_index=process_index,
                                    process_count=process_count))


def write_image(path, mode="RGB", size=(12, 10), fmt=None):
  os.makedirs(os.path.dirname(path), exist_ok=True)
  channels = {"L": (), "RGB": (3,), "RGBA": (4,)}[mode]
  pixels = np.random.default_rng(len(str(path))).integers(0, 256, (size[1], size[0], *channels),
                                                          dtype=np.uint8)
  Image.fromarray(pixels, mode).save(path, fmt)


UNICODE_CLASSES = ("café", "猫 cat", "🐶")
UNICODE_FILES = ("été 1.png", "写真.jpg", "a b.png")


def write_unicode_folder(root):
  """train/ and test/ whose class folders and files are named with accents, CJK, emoji
  and spaces: every name a filesystem allows must be readable."""
  for split in ("train", "test"):
    for name in UNICODE_CLASSES:
      for file in UNICODE_FILES:
        write_image(root / split / name / file, fmt="JPEG" if file.endswith("jpg") else None)
  return root


def closed_port() -> int:
  """A port on 127.0.0.1 that nothing listens on: connections to it are refused."""
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def corrupt_jpeg() -> bytes:
  """A JPEG that passes check_image_file (SOI header, EOI end marker) but whose
  entropy-coded data is cut to a third: progressive, so that every crop window fails."""
  image = Image.fromarray(np.random.default_rng(0).integers(0, 256, (40, 48, 3), np.uint8))
  encoded = io.BytesIO()
  image.save(encoded, "JPEG", progressive=True)
  encoded = encoded.getvalue()
  scan = encoded.index(b"\xff\xda")
  scan += 2 + int.from_bytes(encoded[scan + 2:scan + 4], "big")  # the scan header's end
  return encoded[:scan + (len(encoded) - scan) // 3] + b"\xff\xd9"


if __name__ == "__main__":  # python tests/helpers.py MODULE '[[ARGS...], ...]'
  run_in_one_process(sys.argv[1], json.loads(sys.argv[2]))


def tiny_tfds_builder(class_name: str, features: dict, splits: dict):
  """A TFDS builder class (registered as snake_case(class_name)) whose splits hold the given
  examples: features {name: tfds feature}, splits {split: [example dict, ...]}."""
  import tensorflow_datasets as tfds  # pylint: disable=import-outside-toplevel

  def _info(self):
    return self.dataset_info_from_configs(features=tfds.features.FeaturesDict(features))

  def _split_generators(self, dl_manager):
    return {split: enumerate(examples) for split, examples in splits.items()}

  return type(class_name, (tfds.core.GeneratorBasedBuilder,), {
      "VERSION": tfds.core.Version("1.0.0"), "_info": _info,
      "_split_generators": _split_generators,
      "_generate_examples": None,  # abstract in tfds; the splits above are the examples
      "pkg_dir_path": REPO / "tests"})  # tfds looks for metadata files there
