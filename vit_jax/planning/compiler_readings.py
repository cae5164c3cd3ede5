"""Compiling a program for a target's devices and reading what the compiler says: its
per-device memory (XLA's memory analysis, or the shortfall in an out-of-memory refusal),
its cost analysis (FLOPs, the time estimate) and its collectives. The targets: a TPU
slice's compile-only devices (vit_jax.planning.tpu_slices) or this machine's. What to
compile, and how the readings make a plan, is vit_jax.planning.compiled_plan's."""

import contextlib
import dataclasses
import math
import re
import warnings
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import jax
import jax.numpy as jnp

from vit_jax.base import errors, platforms
from vit_jax.planning import tpu_slices
from vit_jax.training import sharding

_OOM = re.compile(r"required for (?P<what>[^()]*?) \((?P<need>[\d.]+)(?P<u1>[KMGT]?)\) exceeds "
                  r"available HBM \((?P<have>[\d.]+)(?P<u2>[KMGT]?)\)")
# libtpu's other wording: "Ran out of memory in memory space hbm. Used 9.8G of 7.5G hbm."
_OOM_USED = re.compile(r"memory space hbm\. Used (?P<need>[\d.]+)(?P<u1>[KMGT]?) of "
                       r"(?P<have>[\d.]+)(?P<u2>[KMGT]?) hbm")
# What marks a refusal for device memory (a TPU's HBM; a GPU's, in XLA's allocator
# wording), not for a TPU core's scratch memories (vmem, smem) or anything else.
_HBM = re.compile(r"out of memory (?:on HBM|in memory space hbm|while trying to allocate|"
                  r"allocating)", re.IGNORECASE)
_UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
_COLLECTIVE = re.compile(r"^\s*(?:ROOT )?%\S+ = (?P<type>.*?) (?P<kind>all-reduce|all-gather|"
                         r"reduce-scatter|all-to-all|collective-permute)(?:-start)?\(")
_SHAPE = re.compile(r"\b(pred|[fsu]\d+|bf16|f8e\w+)\[([\d,]*)\]")
_BITS = {"pred": 8, "bf16": 16}


@dataclasses.dataclass(frozen=True)
class Target:
  """Where the steps are compiled for: a TPU slice or this machine's devices."""
  name: str
  devices: list
  hbm_bytes_per_device: Optional[int]  # None: unknown (the compiler then decides alone)
  peak_flops_per_device: Optional[float]  # bf16; None where unknown (CPU)
  chips: Optional[int] = None
  cores: Optional[int] = None
  is_tpu: bool = False
  device_kind: Optional[str] = None  # what is planned for, where not the devices' own kind
  prices_time: bool = True  # False: the compiler's time estimates are not the target's
  note: Optional[str] = None  # how the plan stands in for the device (--gpu without one)

  @property
  def num_devices(self) -> int:
    return len(self.devices)


def tpu_target(name: str, hbm_limit_bytes: Optional[int] = None) -> Target:
  tpu = tpu_slices.parse(name)
  hbm = tpu.generation.hbm_bytes_per_device
  return Target(name=name, devices=tpu_slices.compile_only_devices(tpu),
                hbm_bytes_per_device=min(hbm, hbm_limit_bytes or hbm),
                peak_flops_per_device=tpu.peak_flops_per_device, chips=tpu.chips,
                cores=tpu.cores, is_tpu=True)


@dataclasses.dataclass(frozen=True)
class Gpu:
  title: str  # as nvidia-smi names it
  memory_bytes: int  # what nvidia-smi reports as the card's total
  peak_flops: float  # dense bf16, the datasheet's


# GPUs a plan can be sized for without one (--gpu): one card of each.
GPUS = {"a100-40gb": Gpu("NVIDIA A100 40GB", 40_960 * 2**20, 312e12),
        "a100-80gb": Gpu("NVIDIA A100 80GB", 81_920 * 2**20, 312e12),
        "h100": Gpu("NVIDIA H100 80GB", 81_559 * 2**20, 989e12),
        "h200": Gpu("NVIDIA H200", 143_771 * 2**20, 989e12)}
JAX_MEMORY_FRACTION = 0.75  # of a GPU's memory JAX takes by default (XLA_PYTHON_CLIENT_...)


def gpu_memory_fraction() -> float:
  """The share of a GPU's memory a JAX process allocates: XLA_PYTHON_CLIENT_MEM_FRACTION,
  else JAX's default."""
  import os  # pylint: disable=import-outside-toplevel
  text = os.environ.get("XLA_PYTHON_CLIENT_MEM_FRACTION")
  try:
    fraction = float(text) if text else JAX_MEMORY_FRACTION
  except ValueError:
    raise errors.InvalidInput(f"XLA_PYTHON_CLIENT_MEM_FRACTION={text} is not a number: "
                              "set a fraction such as .9, or unset it") from None
  if not 0 < fraction <= 1:
    raise errors.InvalidInput(f"XLA_PYTHON_CLIENT_MEM_FRACTION={text} is not in (0, 1]")
  return fraction


# The compile-only device that stands in for a GPU on a machine without one (no GPU
# compiler runs without a GPU): one TPU v5p chip, the largest HBM libtpu compiles for.
# Its buffer schedule comes far closer to a GPU's than XLA:CPU's: a ViT-B/16 bf16 train
# step at batch 256 takes 21.4 GiB here, 63.6 GiB on XLA:CPU, and on an H100 27.2 GiB
# with XLA attention, 19.9 GiB with cuDNN's (benchmarks/RESULTS.md).
GPU_STAND_IN = "v5p-8"


def gpu_target(name: str, hbm_limit_bytes: Optional[int] = None) -> Target:
  """One GPU of kind `name` (GPUS): its memory as a JAX process gets it, its bf16 peak.
  The steps are compiled for this machine's GPU where it has one, else for one
  compile-only TPU chip (GPU_STAND_IN, with the GPU's memory as its limit; the note says
  so); the TPU compiler's time estimates are not a GPU's and are left out."""
  gpu = GPUS.get(name.lower())
  if gpu is None:
    raise errors.InvalidInput(f"--gpu={name} is not a GPU this plan knows: use one of "
                              f"{', '.join(GPUS)} (or --hbm_limit_gib with this machine's "
                              "devices)")
  usable = min(int(gpu.memory_bytes * gpu_memory_fraction()), hbm_limit_bytes or 2**62)
  local = jax.local_devices()[0]
  if local.platform == "gpu":
    return Target(name=f"one {gpu.title}", devices=[local], hbm_bytes_per_device=usable,
                  peak_flops_per_device=gpu.peak_flops, device_kind=local.device_kind)
  chip = tpu_slices.parse(GPU_STAND_IN)
  if usable > chip.generation.hbm_bytes_per_device:
    raise errors.InvalidInput(
        f"--gpu={name}: its {usable / 2**30:.1f} GiB usable are more than the "
        f"{chip.generation.hbm_bytes_per_device / 2**30:.1f} GiB of the TPU chip that stands "
        "in for it here: lower XLA_PYTHON_CLIENT_MEM_FRACTION or --hbm_limit_gib, or plan on "
        "the GPU itself")
  device = tpu_slices.compile_only_devices(chip)[0]
  return Target(name=f"one {gpu.title}", devices=[device], hbm_bytes_per_device=usable,
                peak_flops_per_device=gpu.peak_flops, is_tpu=True, prices_time=False,
                device_kind=gpu.title,
                note=(f"compiled without a GPU: one compile-only TPU {chip.generation.name} "
                      "chip stands in (its buffer schedule, under the GPU's memory); a GPU "
                      "fuses and attends otherwise (a ViT-B/16 train step: 21.4 GiB here, "
                      "19.9 to 27.2 GiB measured on an H100); on the GPU itself, plan "
                      "without --gpu"))


def local_target() -> Target:
  """This machine's devices: a GPU's memory limit, or the host memory shared by CPU devices."""
  devices = jax.local_devices()
  stats = devices[0].memory_stats() or {}
  if "bytes_limit" in stats:
    hbm = int(stats["bytes_limit"])
  else:
    import os  # pylint: disable=import-outside-toplevel
    hbm = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // len(devices)
  return Target(name="local", devices=devices,
                hbm_bytes_per_device=hbm, peak_flops_per_device=None)


class DoesNotFit(errors.UserError):
  """The compiler refused a program for memory; `need` / `have` bytes per device."""

  def __init__(self, message: str, need: Optional[int], have: Optional[int]):
    super().__init__(message)
    self.need, self.have = need, have


class CompileFailed(errors.UserError):
  """The compiler refused a program for another reason than the device's memory."""


def _bytes(number: str, unit: str) -> int:
  return int(float(number) * _UNITS[unit])


def compile_for(fn: Callable, args: Tuple, target: Target, limit: bool = True):
  """fn lowered on `args` (ShapeDtypeStructs) and compiled for the target's devices;
  DoesNotFit when the compiler runs out of device memory (HBM), CompileFailed when it
  refuses the program for any other reason. limit=False: compiled without the HBM limit a
  user asked for (for cost twins only)."""
  options = {}
  if limit and target.is_tpu and target.hbm_bytes_per_device:
    options["xla_tpu_max_hbm_size_mib"] = target.hbm_bytes_per_device // 2**20
  lowered = fn.lower(*args)
  try:
    with platforms.quiet_stderr(), _unreadable_cache_entries_ignored():
      return lowered.compile(compiler_options=options or None)
  except jax.errors.JaxRuntimeError as e:
    message = " ".join(str(e).split())
    if not out_of_hbm(message):
      raise CompileFailed(f"the compiler refused the program (not for memory): "
                          f"{message[:500]}") from None
    found = _OOM.search(message) or _OOM_USED.search(message)
    need = _bytes(found["need"], found["u1"]) if found else None
    have = _bytes(found["have"], found["u2"]) if found else None
    raise DoesNotFit(message, need, have) from None


def out_of_hbm(message: str) -> bool:
  """Whether a compiler error refuses the program for device memory (HBM)."""
  return "RESOURCE_EXHAUSTED" in message and bool(_HBM.search(message))


@contextlib.contextmanager
def _unreadable_cache_entries_ignored() -> Iterator[None]:
  """Programs compiled for compile-only TPU devices are written to JAX's persistent cache
  (when a user set one) but cannot be loaded back: each later hit warns and compiles
  again. The warning says nothing a planner's user can act on."""
  with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message="Error reading persistent compilation cache")
    yield


def shard_bytes(tree: Any) -> int:
  """Bytes one device holds of a tree of ShapeDtypeStructs with shardings (the largest
  shard: every device holds one of that size)."""
  total = 0
  for leaf in jax.tree.leaves(tree):
    shape = leaf.sharding.shard_shape(leaf.shape)
    total += math.prod(shape) * jnp.dtype(leaf.dtype).itemsize
  return total


def fsdp_saving(tree: Any, num_devices: int) -> int:
  """Bytes per device an fsdp mesh over every device would save on a replicated tree: the
  tensors large enough to be split (sharding.FSDP_MIN_SIZE) all but one part."""
  sizes = [(math.prod(leaf.shape), jnp.dtype(leaf.dtype).itemsize)
           for leaf in jax.tree.leaves(tree)]
  large = sum(n * itemsize for n, itemsize in sizes if n >= sharding.FSDP_MIN_SIZE)
  return large - large // num_devices


def memory(compiled, is_tpu: bool) -> Dict[str, int]:
  """Per-device bytes of a compiled program: arguments, temporaries, peak. The TPU
  compiler's peak comes from its buffer schedule; elsewhere (where that figure is not the
  peak) arguments, outputs and temporaries are counted as live at once."""
  stats = compiled.memory_analysis()
  live = (stats.argument_size_in_bytes + stats.output_size_in_bytes
          + stats.temp_size_in_bytes - stats.alias_size_in_bytes)
  peak = (getattr(stats, "peak_memory_in_bytes", 0) if is_tpu else 0) or live
  return {"argument_bytes": int(stats.argument_size_in_bytes),
          "temp_bytes": int(stats.temp_size_in_bytes), "peak_bytes_per_device": int(peak)}


def cost(compiled) -> Dict[str, Optional[float]]:
  """Per-device FLOPs, bytes accessed and the compiler's time estimate (None if absent).
  libtpu 0.0.42 returns a negative optimal_seconds for some programs on v4, v5e and v6e
  (float32 fine-tuning steps that it prices well on v2, v3 and v5p): no estimate, then."""
  analysis = compiled.cost_analysis() or {}
  analysis = analysis[0] if isinstance(analysis, list) else analysis
  get = lambda key: float(analysis[key]) if key in analysis else None
  seconds = get("optimal_seconds")
  return {"flops": get("flops"), "bytes": get("bytes accessed"),
          "seconds": seconds if seconds is not None and seconds > 0 else None}


def collectives(compiled) -> List[Dict[str, Any]]:
  """[{kind, count, bytes}] of the collectives in the compiled program, as written (an
  op inside a loop body, e.g. per micro-batch, is listed once)."""
  found: Dict[str, List[int]] = {}
  for line in compiled.as_text().splitlines():
    match = _COLLECTIVE.match(line)
    if not match:
      continue
    size = 0
    for dtype, dims in _SHAPE.findall(match["type"]):
      bits = _BITS.get(dtype) or int(re.sub(r"\D", "", dtype.split("e")[0]) or 8)
      size += math.prod(int(d) for d in dims.split(",") if d) * bits // 8
    counted = found.setdefault(match["kind"], [0, 0])
    counted[0] += 1
    counted[1] += size
  return [{"kind": kind, "count": n, "bytes": b} for kind, (n, b) in sorted(found.items())]
