"""Real processes of our commands for tests about processes (signals, exit codes, several
processes on one job), without each paying for importing TensorFlow (~4 s of CPU, most of
a command's start): a server that imported it once forks one child per command line.

The child is an ordinary process for the test: its own pid, real signals, its own exit
status, environment, working directory and output file. It runs its module as `python -m`
does (tests/command_runner.run_child: runpy, the same argv). Only TensorFlow,
scikit-learn's datasets and matplotlib's Agg canvas are imported before the fork: they
read no setting a test varies, while JAX, gcsfs and huggingface_hub read theirs (JAX_*,
XLA_FLAGS, the storage and Hub hosts) in the child. Each pytest process starts its own server on first use.

start(argv, env, cwd, output[, errors]) -> Process, with the subprocess.Popen calls tests
use; run(argv, env, cwd, folder, timeout) -> its CompletedProcess once it ended."""

import atexit
import json
import os
import subprocess
import sys
import threading
import time

import command_runner
import gc_tuning

_lock = threading.Lock()
_server = None


class Process:
  """A command started by the server (its child, so the server reaps it)."""

  def __init__(self, pid: int):
    self.pid = pid
    self.returncode = None

  def send_signal(self, signum: int) -> None:
    if self.returncode is None:
      os.kill(self.pid, signum)

  def kill(self) -> None:
    self.send_signal(9)

  def poll(self):
    return self.wait(timeout=0, raise_on_timeout=False)

  def wait(self, timeout=None, raise_on_timeout=True):
    if self.returncode is None:
      self.returncode = _ask({"wait": self.pid,
                              "timeout": 1e9 if timeout is None else timeout})["status"]
    if self.returncode is None and raise_on_timeout:
      raise subprocess.TimeoutExpired(str(self.pid), timeout)
    return self.returncode


def start(argv, env, cwd, output, errors=None) -> Process:
  """`python -m MODULE ARGS` (argv: [MODULE, ARG, ...]) forked from the server, with the
  environment `env` and working directory `cwd`; its stdout and stderr go to the file
  `output` (its stderr to the file `errors` when given). The server starts with the first
  command's environment; later commands must have its PYTHONPATH (sys.path is set when an
  interpreter starts)."""
  global _server  # pylint: disable=global-statement
  with _lock:
    if _server is None:
      _server = subprocess.Popen([sys.executable, __file__], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                 env=env, cwd=os.path.dirname(__file__))
      _server.pythonpath = env.get("PYTHONPATH")
      atexit.register(_server.stdin.close)  # the server ends (and kills its children) on EOF
    if env.get("PYTHONPATH") != _server.pythonpath:
      raise ValueError(f"the fork server's PYTHONPATH is {_server.pythonpath!r}, not "
                       f"{env.get('PYTHONPATH')!r}: start this command with subprocess")
  return Process(_ask({"start": {"argv": [str(a) for a in argv], "env": dict(env),
                                 "cwd": str(cwd), "output": str(output),
                                 "errors": None if errors is None else str(errors)}})["pid"])


def run(argv, env, cwd, folder, timeout) -> subprocess.CompletedProcess:
  """`python -m MODULE ARGS` to its end, as subprocess.run with capture_output would give
  it: its stdout and stderr apart, in files under `folder` named after the module."""
  stdout, stderr = (folder / f"{argv[0]}.{stream}" for stream in ("stdout", "stderr"))
  process = start(argv, env, cwd, stdout, errors=stderr)
  try:
    code = process.wait(timeout=timeout)
  finally:
    process.kill()  # a no-op once it ended
  return subprocess.CompletedProcess(argv, code, stdout.read_text(), stderr.read_text())


def _ask(request):
  with _lock:
    _server.stdin.write(json.dumps(request) + "\n")
    _server.stdin.flush()
    answer = _server.stdout.readline()
  if not answer:
    raise RuntimeError("the fork server ended")
  return json.loads(answer)


def _serve():
  """The server: one JSON request per line on stdin, one answer per line on stdout."""
  import sklearn.datasets  # noqa: F401 pylint: disable=import-outside-toplevel,unused-import
  import tensorflow  # noqa: F401 pylint: disable=import-outside-toplevel,unused-import
  # What every main job's first evaluation draws its confusion matrix with (~0.6 s).
  import matplotlib.backends.backend_agg  # noqa: F401 pylint: disable=import-outside-toplevel
  import matplotlib.figure  # noqa: F401 pylint: disable=import-outside-toplevel,unused-import
  gc_tuning.fewer_collections()  # the children inherit it
  answers, children = sys.stdout, set()
  sys.stdout = sys.stderr  # nothing else may write on the answer channel
  try:
    for line in sys.stdin:
      request = json.loads(line)
      if "start" in request:
        answer = {"pid": _fork(**request["start"])}
        children.add(answer["pid"])
      else:
        answer = {"status": _wait(request["wait"], request["timeout"])}
      answers.write(json.dumps(answer) + "\n")
      answers.flush()
  finally:
    for pid in children:
      try:
        os.kill(pid, 9)
      except ProcessLookupError:
        pass


def _fork(argv, env, cwd, output, errors) -> int:
  for path in (output, errors) if errors else (output,):
    open(path, "w").close()  # there when start() returns, as with Popen(stdout=file)
  sys.stderr.flush()
  pid = os.fork()
  if pid:
    return pid
  os.environ.clear()
  os.environ.update(env)
  os.chdir(cwd)
  sys.path[0] = cwd  # as `python -m` has it (the server's was this folder)
  null = os.open(os.devnull, os.O_RDONLY)
  os.dup2(null, 0)
  os.close(null)
  command_runner.run_child(argv[0], argv[1:], output, errors)  # never returns
  return 0


def _wait(pid, timeout):
  """The exit status (as Popen's returncode), or None if it runs on past `timeout` s."""
  deadline = time.monotonic() + timeout
  while True:
    done, status = os.waitpid(pid, os.WNOHANG)
    if done:
      return os.waitstatus_to_exitcode(status)
    if time.monotonic() >= deadline:
      return None
    time.sleep(0.02)


if __name__ == "__main__":
  _serve()
