"""A store that stops answering at several points of a checkpoint's save (the link to
the emulator cut as the save's first object appears, while its arrays are written, and
during the next save): the run ends with the one `error: lost the connection` line, no
traceback, within two minutes of the cut (tensorstore's retries bounded:
vit_jax/training/runs/store_retries.py), and no checkpoint the cut interrupted reads as
complete."""

import os
import re
import threading
import time

import gcsfs.core
import pytest

import fork_server
import gcs_emulator
import helpers
from conftest import REPO
from vit_jax.base import url_clients

pytestmark = pytest.mark.long

ARGS = helpers.demo_args(total_steps=100000, checkpoint_every=4, eval_every=100000)
LIMIT_S = 120
# How long the four runs, started at once, may take to reach their cut point: their start
# and compile, not what is tested (the end within LIMIT_S of the cut). 300 s was not
# enough once on a 2-core host at load 100 (another session's suite beside a burner).
REACH_S = 900


def _objects(workdir, fs=None):
  """Object names under <workdir>/checkpoints (through `fs`, a gcsfs of another
  emulator, when given)."""
  default, key = url_clients.url_filesystem(f"{workdir}/checkpoints")
  fs = fs or default
  fs.invalidate_cache()
  try:
    return [name[len(key) + 1:] for name in fs.find(key)]
  except FileNotFoundError:
    return []


def _steps(names, complete):
  return {name.split("/")[0] for name in names
          if not complete or name.endswith("/commit_success.txt")}


# When to cut: a predicate on the object names under <workdir>/checkpoints.
CUTS = {
    "first object of the first save": lambda names: bool(names),
    "arrays of the first save": lambda names: any("/d/" in name for name in names),
    "during the second save": lambda names: len(_steps(names, False)) >= 2,
}
STOPS = ("first object of the first save",)  # the emulator itself stopped, not a link cut


class _Cut:
  """A run whose link is cut at `when` (or, with an emulator of its own, whose emulator
  stops then); `cut_at` is the time of the cut."""

  def __init__(self, gcs, folder, name, when, own_emulator=False):
    tag = name.replace(" ", "_").replace(",", "")
    self.workdir = f"gs://{gcs.bucket}/faults/{tag}"
    self.log = os.path.join(folder, f"{tag}.log")
    self.link, self.cut_at, self.fs = gcs_emulator.Link(gcs), None, None
    env, self.stop, self.emulator = self.link.env, self.link.cut, None
    if own_emulator:
      os.makedirs(os.path.join(folder, tag))
      self.emulator = gcs_emulator.Emulator(os.path.join(folder, tag), gcs.bucket)
      env, self.stop = self.emulator.env, self.emulator.stop
      self.fs = gcsfs.core.GCSFileSystem(  # the class without the bucket-layout probe
          endpoint_url=self.emulator.endpoint, token="anon",
          skip_instance_cache=True)
    self.run = fork_server.start(["vit_jax.main", *ARGS, f"--workdir={self.workdir}"],
                                 helpers.subprocess_env(1, **env), REPO, self.log)
    self.thread = threading.Thread(target=self._cut_when, args=(when,), daemon=True)
    self.thread.start()

  def _cut_when(self, when):
    names = []
    try:
      while self.run.poll() is None and not when(names := _objects(self.workdir, self.fs)):
        time.sleep(0.05)
    finally:
      self.stop()
      self.cut_at = time.monotonic()
      # A tiny save can write its arrays and its commit marker between two polls: the
      # steps already complete when the link was cut are not the cut's to spoil.
      self.complete_at_cut = _steps(names, True)


def _trained_a_step(cut):
  """Whether the run printed a progress line (its train step compiled and in JAX's
  persistent cache) or ended."""
  with open(cut.log) as f:
    return re.search(r" step \d+/", f.read()) is not None or cut.run.poll() is not None


@pytest.fixture(scope="module")
def cuts(gcs, tmp_path_factory):
  """The runs, each waiting out its own outage at once. The first starts alone, until its
  train step is compiled: the others then load it from the cache instead of compiling it
  three more times side by side."""
  folder = tmp_path_factory.mktemp("faults")
  points = [(name, when, False) for name, when in CUTS.items()] + [
      (f"{name}, emulator stopped", CUTS[name], True) for name in STOPS]
  started = {}
  for name, when, own_emulator in points:
    started[name] = _Cut(gcs, folder, name, when, own_emulator)
    if len(started) == 1:
      deadline = time.monotonic() + REACH_S
      while not _trained_a_step(started[name]) and time.monotonic() < deadline:
        time.sleep(0.2)
  yield started
  for cut in started.values():
    cut.link.cut()
    if cut.emulator is not None:
      cut.emulator.stop()
    if cut.run.poll() is None:
      cut.run.kill()
      cut.run.wait()


@pytest.mark.parametrize("point", [*CUTS, *(f"{name}, emulator stopped" for name in STOPS)])
def test_a_store_cut_during_a_save_ends_the_run_in_one_line_within_two_minutes(cuts, point):
  cut = cuts[point]
  cut.thread.join(timeout=REACH_S)
  assert cut.cut_at is not None, f"the save did not reach the point in {REACH_S} s"
  deadline = cut.cut_at + LIMIT_S
  while cut.run.poll() is None and time.monotonic() < deadline + 10:
    time.sleep(0.5)
  ended = time.monotonic()
  with open(cut.log) as f:
    log = f.read()
  assert cut.run.poll() is not None, f"still running {LIMIT_S + 10} s after the cut: {log[-2000:]}"
  lines = log.strip().splitlines()
  assert cut.run.returncode == 1 and lines[-1].startswith(
      "error: lost the connection to gs://"), log[-3000:]
  assert "Traceback" not in log, log[-3000:]
  assert ended - cut.cut_at <= LIMIT_S + 1, f"{ended - cut.cut_at:.0f} s after the cut"
  if cut.emulator is not None:
    cut.emulator.start()  # on the same data: what the run left
  names = _objects(cut.workdir, cut.fs)
  complete = _steps(names, True)
  for step in _steps(names, False) - complete:  # the save cut off: no commit marker
    assert not [n for n in names if n.startswith(f"{step}/commit_success")]
  if not point.startswith("during the second save"):  # nothing completed after the cut
    assert complete <= cut.complete_at_cut, (complete, cut.complete_at_cut)
