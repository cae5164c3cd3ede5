"""Helpers shared by several test modules: small configs, generated image folders and
files, metrics readers (pytest fixtures live in conftest.py)."""

import contextlib
import importlib.util
import io
import json
import os
import pathlib
import subprocess
import urllib.request

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
  """`python -m vit_jax.main` flags for the same run as demo_config(**overrides)."""
  return ["--config=configs/demo.py"] + [f"--config.{key}={value}" for key, value
                                         in {**DEMO_SETTINGS, **overrides}.items()]


def subprocess_env(devices=None, **extra):
  """The environment of a command a test starts: this checkout's code, TensorFlow quiet,
  the test XLA flags set in conftest, and `devices` CPU devices when given."""
  env = {**os.environ, "PYTHONPATH": str(REPO), "TF_CPP_MIN_LOG_LEVEL": "3", **extra}
  if devices:
    flags = [flag for flag in os.environ.get("XLA_FLAGS", "").split()
             if not flag.startswith("--xla_force_host_platform_device_count")]
    env["XLA_FLAGS"] = " ".join(flags + [f"--xla_force_host_platform_device_count={devices}"])
  return env


def run_in_process(command, *args) -> subprocess.CompletedProcess:
  """`python -m <command> ARGS` in this process (`command`: the module with main and
  define_flags), parsed and ended by vit_jax.cli as cli.run does: a usage mistake exits 2, a
  user error 1, each with one `error:` line; a bug raises here. Its flags live on their own
  FlagValues. Seconds cheaper than a process; keep one real process per command line."""
  from absl import flags  # pylint: disable=import-outside-toplevel
  from vit_jax import cli  # pylint: disable=import-outside-toplevel
  argv = [command.__name__, *map(str, args)]
  flag_values = flags.FlagValues()
  stdout, stderr = io.StringIO(), io.StringIO()
  with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
    try:
      cli.define_or_exit(command.define_flags, flag_values)
      cli.with_exit_codes(command.main)(cli.parse_flags(argv, flag_values), flag_values)
      code = 0
    except SystemExit as e:
      code = e.code
  return subprocess.CompletedProcess(argv, code, stdout.getvalue(), stderr.getvalue())


def read_metrics(workdir):
  """The run's metrics.jsonl rows, through the package's one reader."""
  from vit_jax.runs import metrics  # pylint: disable=import-outside-toplevel
  return metrics.read_rows(str(workdir))


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


def serve_from(path):
  """An urlopen that serves `path` for every URL and records the URLs asked for."""
  asked = []

  def urlopen(url, timeout):
    asked.append(url)
    return urllib.request.urlopen(path.as_uri(), timeout=timeout)
  return urlopen, asked


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
