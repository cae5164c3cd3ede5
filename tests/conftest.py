"""Shared test fixtures: paths to the released-format fixtures and tiny models."""

import contextlib
import fcntl
import hashlib
import os
import pathlib
import pickle
import platform
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def _compile_cache_dir() -> str:
  """Where the tests keep compiled programs between runs: beside .ci/run's virtualenv
  (~/.cache/vit_jax), so that a rerun of the suite (everyone's inner loop, and CI where it
  keeps that cache) loads what it compiled before instead of compiling it again (about a
  quarter of a cold run's CPU). One folder per CPU model and instruction set: XLA compiles CPU
  code for the machine it runs on, and a copied home folder must not bring code for
  another CPU. The root is predict.cache_dir()'s, written again here because importing
  vit_jax imports jax, which reads these settings at import."""
  cpu = ""
  with contextlib.suppress(OSError):
    cpu = "".join(sorted({line for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines()
                          if line.startswith(("model name", "flags", "vendor_id", "cpu family",
                                              "model\t"))}))
  machine = hashlib.sha256((platform.machine() + cpu).encode()).hexdigest()[:12]
  cache_home = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
  folder = os.path.join(cache_home, "vit_jax", f"xla_cache_tests-{machine}")
  try:
    os.makedirs(folder, exist_ok=True)
  except OSError:  # a read-only or missing home: this run's temporary folder, as before
    folder = os.path.join(tempfile.gettempdir(), f"vit_jax_tests_xla_cache-{machine}")
  return folder


# Many tests (and the main-job subprocesses they start, which inherit the environment)
# compile the same small train and eval steps: XLA's persistent cache shares them between
# tests, pytest-xdist workers, processes and runs of the suite. Keyed by the program,
# compiler and JAX version, so a hit is the same executable; bounded (least recently used
# programs go first); set before jax is imported.
if "JAX_COMPILATION_CACHE_DIR" not in os.environ:  # a folder of one's own gets no bound:
  # JAX's eviction needs the access-time file it writes beside each entry it stores itself
  os.environ["JAX_COMPILATION_CACHE_DIR"] = _compile_cache_dir()
  os.environ.setdefault("JAX_COMPILATION_CACHE_MAX_SIZE", str(2 * 2**30))
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0.2")
# Test programs are small and run a few steps: most of their compile time is LLVM
# optimising loops that then run a few times. Unoptimised code compiles a demo main job
# in ~14 s of CPU instead of ~20 s; matrix products still go to the same kernels. Also
# for the subprocesses (helpers.subprocess_env keeps it). Set XLA_FLAGS to override.
if "xla_backend_optimization_level" not in os.environ.get("XLA_FLAGS", ""):
  os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                             " --xla_backend_optimization_level=0").strip()

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import traverse_util

import gc_tuning
import helpers
import module_order
import worker_count
from vit_jax import create_model


# A bound on the memory kept: a suite's worker loads about 200 distinct executables from
# the cache (of ~460 there, 182 MB on disk, most under 0.2 MB each); keeping 64, half of
# its loads were of ones it had loaded before (~16 s of CPU per worker on the 2-core VM).
_EXECUTABLES_KEPT = 256


def _keep_loaded_executables():
  """Tests in one process run the same programs again and again (every demo run traces new
  functions, whose executables come from the persistent cache): keep each executable once
  loaded from the cache, under its cache key and devices, instead of deserialising it again
  (~0.5 s of CPU each on a 2-core VM, a fifth of an in-process demo run). The key names the
  program, compiler and options, so what comes back is what loading would give."""
  from jax._src import compilation_cache  # pylint: disable=import-outside-toplevel
  load = getattr(compilation_cache, "get_executable_and_time", None)
  if load is None:  # another JAX: nothing kept, nothing changed
    return
  loaded = {}

  def get_executable_and_time(cache_key, compile_options, backend, executable_devices):
    key = (cache_key, tuple(device.id for device in executable_devices))
    if key not in loaded:
      found = load(cache_key, compile_options, backend, executable_devices)
      if found[0] is None:
        return found
      loaded[key] = found
      if len(loaded) > _EXECUTABLES_KEPT:
        del loaded[next(iter(loaded))]  # the least recently used
    loaded[key] = loaded.pop(key)  # now the most recently used
    return loaded[key]

  compilation_cache.get_executable_and_time = get_executable_and_time


_keep_loaded_executables()
gc_tuning.fewer_collections()

REPO = pathlib.Path(__file__).resolve().parents[1]
RELEASED_FIXTURES = REPO.parent / "shared" / "fixtures" / "released_format"

TINY = dict(patch_size=4, hidden_size=32, mlp_dim=64, num_heads=2, num_layers=2)


def pytest_configure(config):
  config.addinivalue_line("markers", "long: a module of real-process runs that takes a minute "
                          "or more; such modules start first")
  config.pluginmanager.register(
      module_order.ModuleOrder(f"{_compile_cache_dir()}-module-seconds.json"), "module_order")
  # pytest-xdist hands out --dist loadfile's files most tests first unless told not to
  # (--no-loadscope-reorder): that would send the long modules, which have few tests, out
  # last, whatever order pytest_collection_modifyitems gives them.
  if getattr(config.option, "loadscopereorder", False):
    config.option.loadscopereorder = False


@pytest.hookimpl(tryfirst=True)
def pytest_xdist_auto_num_workers(config):
  ignored = worker_count.ignored_setting()
  if ignored:
    config.issue_config_time_warning(pytest.PytestConfigWarning(ignored), stacklevel=2)
  return worker_count.auto_workers()


@pytest.fixture(name="demo_run", scope="session")
def fixture_demo_run(tmp_path_factory):
  """The shared demo run (helpers.DEMO_SETTINGS) on one device, finished: (its workdir, its
  result). How often it evaluates or saves does not change its params, so it is also the
  one-device reference of the runs on other layouts. Read-only: tests that go on from it
  copy it first. Made once per test session: pytest-xdist's workers share it through their
  common temporary folder, the first to need it runs it while another waits on the lock."""
  from vit_jax.training import loop  # pylint: disable=import-outside-toplevel
  root, name = tmp_path_factory.getbasetemp(), "demo_run"
  session = os.environ.get("PYTEST_XDIST_TESTRUNUID")  # set in pytest-xdist's workers
  if session:
    # The session's folder, above each worker's own; named per session, since a reused
    # --basetemp keeps what an earlier session left there.
    root, name = root.parent, f"demo_run-{session}"
  workdir, result_file = root / name, root / f"{name}.pickle"
  with open(root / f"{name}.lock", "a") as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)
    if not result_file.exists():
      result = loop.train_and_evaluate(helpers.demo_config(), str(workdir))
      result_file.with_suffix(".partial").write_bytes(pickle.dumps(result))
      result_file.with_suffix(".partial").rename(result_file)
  return workdir, pickle.loads(result_file.read_bytes())


@pytest.fixture(scope="module")
def gcs(tmp_path_factory):
  """A Cloud Storage emulator on 127.0.0.1 for one test module (tests/gcs_emulator.py);
  this process and the jobs it starts reach it through the environment."""
  import gcs_emulator  # pylint: disable=import-outside-toplevel
  emulator = gcs_emulator.Emulator(str(tmp_path_factory.mktemp("gcs")))
  saved = {key: os.environ.get(key) for key in emulator.env}
  os.environ.update(emulator.env)
  # etils.epath (orbax's paths) decides once per process whether gs:// goes through
  # tf.io.gfile, which cannot reach an emulator; an earlier test may have made it decide.
  from etils.epath import gpath  # pylint: disable=import-outside-toplevel
  gpath._is_tf_installed.cache_clear()  # pylint: disable=protected-access
  try:
    yield emulator
  finally:
    emulator.stop()
    for key, value in saved.items():
      if value is None:
        os.environ.pop(key, None)
      else:
        os.environ[key] = value
    gpath._is_tf_installed.cache_clear()  # pylint: disable=protected-access


@pytest.fixture
def released_fixtures() -> pathlib.Path:
  assert RELEASED_FIXTURES.is_dir(), f"missing {RELEASED_FIXTURES}: CI clones ../shared beside"
  return RELEASED_FIXTURES


def tiny_model(num_classes=5, **overrides):
  """A 2-block ViT small enough for fast tests; overrides change any attribute."""
  return create_model("ViT-Ti_16", num_classes=num_classes, **{**TINY, **overrides})


def init_params(module, image_size=16, seed=0):
  """Random params for `module`, with a non-zero head so that head bugs show."""
  params = jax.jit(module.init)(jax.random.PRNGKey(seed),  # one program, not op by op
                                jnp.zeros((1, image_size, image_size, 3)))
  params = jax.tree.map(lambda x: x, params["params"])
  head = params["head"]
  head["kernel"] = jax.random.normal(jax.random.PRNGKey(seed + 1), head["kernel"].shape)
  return params


def random_params(module, image_size, seed=0):
  """Random params for `module` without running its init (eagerly, each op of a new model
  compiles; jitted, its random init compiles for ~0.2 s per array): N(0, 1/fan_in) kernels,
  scales 1 + N(0, 0.1), biases and embeddings N(0, 0.1). Every array is off its initial
  value, so that a wrongly mapped array changes the logits."""
  shapes = jax.eval_shape(module.init, jax.random.PRNGKey(0),
                          jnp.zeros((1, image_size, image_size, 3)))["params"]
  rng = np.random.default_rng(seed)
  flat = {}
  for key, shape in traverse_util.flatten_dict(shapes, sep="/").items():
    shape = shape.shape
    value = rng.standard_normal(shape, np.float32)  # float32 draws: 4x faster than float64's
    if key.endswith("/kernel"):
      fan_in = shape[0] if len(shape) == 3 and "/out/" not in key else np.prod(shape[:-1])
      value *= np.float32(1 / np.sqrt(fan_in))
    else:
      value = (1 if key.endswith("/scale") else 0) + np.float32(0.1) * value
    flat[key] = value
  return traverse_util.unflatten_dict(flat, sep="/")


@pytest.fixture(name="folder")
def fixture_folder(tmp_path):
  """train/ with mixed extensions, cases, grayscale and RGBA; test/ with both classes."""
  helpers.write_image(tmp_path / "train/dog/a.JPG", fmt="JPEG")
  helpers.write_image(tmp_path / "train/dog/b.png", mode="L")
  helpers.write_image(tmp_path / "train/cat/c.Png", mode="RGBA", size=(30, 20))
  helpers.write_image(tmp_path / "train/cat/d.jpeg", mode="L", fmt="JPEG")
  (tmp_path / "train/cat/notes.txt").write_text("not an image")
  helpers.write_image(tmp_path / "test/cat/e.png")
  helpers.write_image(tmp_path / "test/dog/f.jpg", fmt="JPEG")
  return tmp_path


# The Hub stand-in and the closed bucket (tests/hub_server.py), one pair per test module.
@pytest.fixture(scope="module")
def hub_repos(tmp_path_factory):
  import hub_server  # pylint: disable=import-outside-toplevel (it imports this module)
  return hub_server.build_repos(tmp_path_factory.mktemp("repos"))


@pytest.fixture(scope="module")
def hub_servers(hub_repos):
  import hub_server  # pylint: disable=import-outside-toplevel
  site, bucket = hub_server.HubServer(hub_repos), hub_server.HubServer(forbid=True)
  yield site, bucket
  site.close()
  bucket.close()


@pytest.fixture
def hub_site_and_bucket(hub_servers, tmp_path, monkeypatch):
  """Both servers in use (HF_ENDPOINT, the storage host), a fresh Hub cache, cwd tmp_path."""
  import hub_server  # pylint: disable=import-outside-toplevel
  return hub_server.use_servers(*hub_servers, tmp_path, monkeypatch)
