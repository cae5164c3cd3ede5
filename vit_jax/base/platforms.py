"""Which JAX platforms a process starts, and quiet C++ start-up output.

libtpu (the `tpu` extra, and the test extra: vit_jax.plan compiles for TPU slices on any
machine) tries to start a TPU backend on every machine, and on one without TPUs writes
a screenful of warnings to the terminal ('Failed to find host bounds', 'could not
determine TPU accelerator type'). Where no TPU is attached, the TPU backend is left out
(the compile-only topologies of vit_jax.planning.tpu_slices do not need it); JAX_PLATFORMS, when
set, is the user's choice and is kept.
"""

import contextlib
import glob
import importlib.util
import os
import tempfile
from typing import Iterator, List

GOOGLE_PCI_VENDOR = "0x1ae0"  # TPU chips' PCI vendor (all generations)
CUDA_PLUGINS = ("jax_cuda13_plugin", "jax_cuda12_plugin")


def tpu_attached() -> bool:
  """A TPU chip on this machine's PCI bus, or a TPU device file (/dev/accel*, /dev/vfio)."""
  for vendor in glob.glob("/sys/bus/pci/devices/*/vendor"):
    try:
      with open(vendor, encoding="ascii") as f:
        if f.read().strip() == GOOGLE_PCI_VENDOR:
          return True
    except OSError:
      continue
  return bool(glob.glob("/dev/accel*") or glob.glob("/dev/vfio/[0-9]*"))


def platforms_without_tpu() -> str:
  """JAX_PLATFORMS for a machine without TPUs: its GPUs (if JAX can drive them) and the CPU."""
  has_cuda = os.path.exists("/dev/nvidia0") and any(
      importlib.util.find_spec(name) is not None for name in CUDA_PLUGINS)
  return "cuda,cpu" if has_cuda else "cpu"


def skip_absent_tpu() -> None:
  """Leaves the TPU backend out where libtpu is installed but no TPU is attached. Must run
  before JAX starts its backends (on import of vit_jax)."""
  if os.environ.get("JAX_PLATFORMS") or importlib.util.find_spec("libtpu") is None:
    return
  if tpu_attached():
    return
  import jax  # pylint: disable=import-outside-toplevel
  jax.config.update("jax_platforms", platforms_without_tpu())


@contextlib.contextmanager
def quiet_stderr() -> Iterator[List[str]]:
  """Hides what C++ libraries write to file descriptor 2 (libtpu's start-up lines when a
  topology is built or a program compiled on a machine without TPUs); the captured lines
  are yielded for callers that show them on request."""
  captured: List[str] = []
  with tempfile.TemporaryFile(mode="w+b") as sink:
    saved = os.dup(2)
    os.dup2(sink.fileno(), 2)
    try:
      yield captured
    finally:
      os.dup2(saved, 2)
      os.close(saved)
      sink.seek(0)
      captured.extend(sink.read().decode(errors="replace").splitlines())
