"""python -m vit_jax.export: bad input ends in one `error:` line with nothing written under
OUT; a good run prints what it wrote and the parity it measured."""

import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import REPO
from export_cases import checkpoints, leftovers, read_metadata  # noqa: F401 (a fixture)
from helpers import run_in_process
from vit_jax.export import __main__ as export_command


@pytest.fixture(scope="module")
def runs(checkpoints, tmp_path_factory):
  """{case: (root, OUT, exit code, stdout, stderr)}: the good run as a process (the command
  line), the bad inputs in this process through the command's flags and cli's endings."""
  root = tmp_path_factory.mktemp("command")
  gap, _ = checkpoints["gap"]
  corrupt = root / "corrupt.npz"
  corrupt.write_bytes(b"PK\x03\x04 not really a zip archive" * 10)
  (root / "a_file").write_text("a file, not a folder")
  (root / "existing").mkdir()
  (root / "existing" / "keep.txt").write_text("finished work")
  cases = {
      "corrupt": (corrupt, root / "out_corrupt", "--to=stablehlo"),
      "unwritable": (gap, root / "a_file" / "out", "--to=stablehlo"),
      "unknown_to": (gap, root / "out_unknown", "--to=keras"),
      "existing": (gap, root / "existing", "--to=stablehlo"),
      "naflex_size": (gap, root / "out_naflex", "--to=stablehlo", "--max_patches=12",
                      "--image_size=32"),
  }
  results = {}
  for case, args in cases.items():
    done = run_in_process(export_command, *args)
    results[case] = (root, args[1], done.returncode, done.stdout, done.stderr)
  out = root / "out_good"
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", JAX_PLATFORMS="cpu",
             PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
  good = subprocess.Popen([sys.executable, "-m", "vit_jax.export", gap, str(out),
                           "--to=stablehlo", "--batch=dynamic"], cwd=REPO, env=env, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE)
  # A second export into the same OUT while the first holds it (stopped by SIGSTOP there,
  # so that it cannot finish meanwhile).
  stop_while_holding(good, root / ".out_good.lock")
  try:
    done = run_in_process(export_command, gap, out, "--to=stablehlo")
    results["concurrent"] = (root, out, done.returncode, done.stdout, done.stderr)
  finally:
    good.send_signal(signal.SIGCONT)
  stdout, stderr = good.communicate(timeout=600)
  results["good"] = (root, out, good.returncode, stdout, stderr)
  return results


def stop_while_holding(process, lock, timeout=300):
  """SIGSTOPs `process` once the lock file names it as the writer."""
  deadline = time.time() + timeout
  while f"(pid {process.pid})" not in (lock.read_text() if lock.exists() else ""):
    assert process.poll() is None and time.time() < deadline, process.communicate()
    time.sleep(0.005)
  process.send_signal(signal.SIGSTOP)


@pytest.mark.parametrize("case, names", [
    ("corrupt", ["corrupt.npz"]), ("unwritable", ["a_file", "is a file, not a folder"]),
    ("unknown_to", ["keras", "stablehlo, saved_model, tflite, onnx"]),
    ("existing", ["already holds files it did not write", "--overwrite"]),
    ("naflex_size", ["--max_patches takes each image at its own size (NaFlex)"])])
def test_bad_input_is_one_line_and_writes_nothing(runs, case, names):
  root, out, code, stdout, stderr = runs[case]
  lines = stderr.strip().splitlines()
  assert code != 0 and len(lines) == 1 and lines[0].startswith("error: "), stderr
  for name in names:
    assert name in lines[0]
  if case == "existing":
    assert os.listdir(out) == ["keep.txt"]
  else:
    assert not os.path.exists(out)
  assert leftovers(root) == [] and stdout.strip() == ""


def test_an_export_into_an_out_being_written_fails_and_the_first_one_wins(runs):
  root, out, code, stdout, stderr = runs["concurrent"]
  assert code == 1 and stdout == "", stderr
  assert stderr.startswith(f"error: {out} is being written by vit_jax.export (pid ")
  assert "right now: wait until it ends" in stderr and len(stderr.splitlines()) == 1
  assert runs["good"][2] == 0 and os.listdir(root).count(".out_good.lock") == 0


def test_good_run_prints_the_parity(runs):
  _, out, code, stdout, stderr = runs["good"]
  assert code == 0, stderr
  meta = read_metadata(out)
  assert sorted(os.listdir(out)) == [".vit_jax-output.json", "metadata.json", "model.stablehlo"]
  assert "max relative logit difference" in stdout and "tolerance 1e-05" in stdout
  assert meta["parity"]["max_relative_logit_difference"] <= 1e-5
