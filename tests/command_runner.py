"""Runs many `python -m MODULE ARG...` command lines from one Python process, for tests that
need each command's exit status and output only (--help, usage mistakes): most of a
command's start is importing JAX and TensorFlow, paid here once instead of once per run.

The process imports JAX and what every command imports (flax, optax, orbax, ml_collections,
the vit_jax package and its command-line layer: ~1.4 s of each child's CPU; they define no
flag beyond absl's own, so --helpfull lists what a fresh process would) and forks one
child per run of the `light` commands (those that start without TensorFlow), then imports
TensorFlow and forks one per run of the `heavy` ones (if any). Each child runs its module
as __main__ as `python -m` does (runpy, the same argv), writes its stdout and stderr into
one file, and exits with the status Python would give (SystemExit's code; 1 and the
traceback for any other exception). Only the imports are shared: each run starts from this
process's state before any command ran.

stdin: JSON {"light": [[module, arg, ...], ...], "heavy": [...]}.
stdout: JSON [[exit status, output], ...] for the light runs, then the heavy ones.
Tests call it through run_all.
"""

import json
import os
import runpy
import subprocess
import sys
import tempfile
import traceback

import gc_tuning


def run_all(light, heavy, *, env, cwd, timeout=300):
  """[(exit status, stdout and stderr)] of the light runs, then the heavy ones, run by one
  process of this script."""
  done = subprocess.run([sys.executable, __file__], cwd=cwd, env=env, text=True,
                        capture_output=True, timeout=timeout, check=True,
                        input=json.dumps({"light": light, "heavy": heavy}))
  return json.loads(done.stdout)


def exit_status(code) -> int:
  """What Python exits with for SystemExit(code)."""
  if code is None:
    return 0
  if isinstance(code, int):
    return code
  print(code, file=sys.stderr)
  return 1


def run_child(module, args, output_path, errors_path=None) -> None:
  """In the forked child: the command, then _exit with its status (no return). Its stdout
  and stderr go to output_path, or stderr to errors_path when given."""
  status = 1
  try:
    for path, streams in ([(output_path, (1, 2))] if errors_path is None else
                          [(output_path, (1,)), (errors_path, (2,))]):
      fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
      for stream in streams:
        os.dup2(fd, stream)
      os.close(fd)
    sys.stdout, sys.stderr = sys.__stdout__, sys.__stderr__  # the files 1 and 2 (the fork
    # server writes its own output elsewhere)
    sys.argv = [module, *args]  # runpy replaces argv[0] with the module's file, as -m does
    runpy.run_module(module, run_name="__main__", alter_sys=True)
    status = 0
  except SystemExit as e:
    status = exit_status(e.code)
  except BaseException:  # pylint: disable=broad-except
    traceback.print_exc()
  finally:
    # What JAX's exit function does at a Python exit (os._exit skips exit functions, and
    # the ones this process inherited are the server's): end a multi-process run's
    # distributed client, a barrier with the other processes. Without it process 0 could
    # exit, ending the coordination service, while process 1 still wrote its results, and
    # process 1 would abort (SIGABRT) as if its peer had died. Nothing in other runs.
    if "jax" in sys.modules:
      sys.modules["jax"].distributed.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)  # pylint: disable=protected-access


def start(runs, folder):
  """[(pid, output path)] of one forked child per run."""
  started = []
  for run in runs:
    fd, output_path = tempfile.mkstemp(dir=folder)
    os.close(fd)
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
      run_child(run[0], run[1:], output_path)
    started.append((pid, output_path))
  return started


def finish(started):
  results = []
  for pid, output_path in started:
    _, wait_status = os.waitpid(pid, 0)
    with open(output_path, encoding="utf-8", errors="replace") as f:
      results.append([os.waitstatus_to_exitcode(wait_status), f.read()])
  return results


def main():
  runs = json.load(sys.stdin)
  with tempfile.TemporaryDirectory() as folder:
    # pylint: disable=import-outside-toplevel,unused-import
    import flax.linen  # noqa: F401
    import jax  # noqa: F401
    import ml_collections  # noqa: F401
    import optax  # noqa: F401
    import orbax.checkpoint  # noqa: F401
    import vit_jax.base.cli  # noqa: F401
    gc_tuning.fewer_collections()  # the children inherit it
    light = start(runs["light"], folder)
    if runs["heavy"]:
      import tensorflow  # noqa: F401
    heavy = start(runs["heavy"], folder)
    results = finish(light) + finish(heavy)
  print(json.dumps(results))


if __name__ == "__main__":
  main()
