"""torch, timm and transformers as pytest fixtures for the interop tests (the `interop`
extra), skipped where they do not import. A module of its own, imported by name: under
pytest's importlib mode a test file imported by another test file is loaded twice, and
the torchvision schemas declared here may be registered only once per process."""

import glob
import importlib.util
import os
import sys

import pytest


def import_or_skip(name):
  """pytest.importorskip, also for a library that fails as it imports (timm with a
  torchvision built for another torch raises RuntimeError)."""
  try:
    return pytest.importorskip(name)
  except Exception as e:  # pylint: disable=broad-except
    pytest.skip(f"{name} does not import: {type(e).__name__}: {e}")


@pytest.fixture(name="torch")
def fixture_torch():
  # torchvision (which timm imports) imports torch._dynamo, which imports triton if it is
  # installed (torch's CUDA builds); triton's LLVM crashes the process when TensorFlow,
  # which other tests in this worker import, is loaded. These tests need neither.
  if "triton" not in sys.modules:
    sys.modules["triton"] = None  # `import triton` raises ImportError: torch does without
  return import_or_skip("torch")


_DECLARED_TORCHVISION_OPS = []  # keeps the Library alive: its schemas die with it


def declare_missing_torchvision_ops(torch) -> None:
  """timm imports torchvision, whose PyPI wheels are built against CUDA torch: beside the
  CPU-only torch (the interop extra) its compiled operators do not load, and its import
  fails registering fakes for nms and qnms. timm's ViTs never call them, so their schemas
  are declared here, and only when torchvision's own library cannot load."""
  spec = importlib.util.find_spec("torchvision")
  if spec is None or _DECLARED_TORCHVISION_OPS:
    return
  library = next(iter(glob.glob(os.path.join(os.path.dirname(spec.origin), "_C*.so"))), None)
  try:
    torch.ops.load_library(library)
  except (OSError, RuntimeError, TypeError):
    declared = torch.library.Library("torchvision", "DEF")
    for op in ("nms", "qnms"):
      declared.define(f"{op}(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    _DECLARED_TORCHVISION_OPS.append(declared)


@pytest.fixture(name="timm")
def fixture_timm(torch):
  declare_missing_torchvision_ops(torch)
  return import_or_skip("timm")


@pytest.fixture(name="transformers")
def fixture_transformers(torch):  # pylint: disable=unused-argument
  return import_or_skip("transformers")
