"""TPU slices by the names Google Cloud sells them (`v3-8`, `v5litepod-16`, `v6e-8`) or by
raw topology (`v3:4x4`), and their compile-only devices: libtpu compiles for any slice on a
CPU machine, so a step can be checked before anyone rents one (vit_jax.plan).

Chip facts (per JAX device; v2/v3 show each TensorCore as a device, v4/v5p one megacore
device per chip, v5e/v6e one core per chip):
  * usable HBM: what libtpu's out-of-memory message reports as available (measured with
    libtpu 0.0.42.1, ../shared/reference/tpu_facts.md);
  * peak: Google's published bf16 matmul peak per chip, the denominator of MFU.
"""

import dataclasses
import math
import os
import re
from typing import Tuple

from vit_jax.base import errors, platforms

GIB = 2**30


@dataclasses.dataclass(frozen=True)
class Generation:
  name: str  # libtpu's topology prefix: v2, v3, v4, v5e, v5p, v6e
  dims: int  # torus dimensions of a topology name (v4: 2x2x1)
  devices_per_chip: int  # JAX devices per chip
  cores_per_chip: int  # TensorCores per chip (the paper's "TPUv3-core-days" counts these)
  name_counts_cores: bool  # v3-8 counts cores (4 chips); v5litepod-8 / v6e-8 count chips
  hbm_bytes_per_device: int
  peak_tflops_per_chip: float  # bf16
  device_kind: str  # what JAX calls its devices
  chip_config: str = "default"  # v4: "megacore", as v4 VMs run (one device per chip)


GENERATIONS = {g.name: g for g in (
    Generation("v2", 2, 2, 2, True, int(7.48 * GIB), 45.0, "TPU v2"),
    Generation("v3", 2, 2, 2, True, int(15.48 * GIB), 123.0, "TPU v3"),
    Generation("v4", 3, 1, 2, True, int(30.75 * GIB), 275.0, "TPU v4", "megacore"),
    Generation("v5e", 2, 1, 1, False, int(15.75 * GIB), 197.0, "TPU v5 lite"),
    Generation("v5p", 3, 1, 2, True, int(95.74 * GIB), 459.0, "TPU v5"),
    Generation("v6e", 2, 1, 1, False, int(31.25 * GIB), 918.0, "TPU v6 lite"),
)}
ALIASES = {"v5litepod": "v5e", "v6litepod": "v6e"}  # Cloud's accelerator-type prefixes
EXAMPLES = "v2-8, v3-8, v3-32 ... v3-2048, v4-8, v5e-16 (v5litepod-16), v5p-8, v6e-8 or v3:4x4"


@dataclasses.dataclass(frozen=True)
class Slice:
  name: str  # as the user wrote it
  generation: Generation
  shape: Tuple[int, ...]  # chips along each torus dimension

  @property
  def chips(self) -> int:
    return math.prod(self.shape)

  @property
  def num_devices(self) -> int:
    return self.chips * self.generation.devices_per_chip

  @property
  def cores(self) -> int:
    return self.chips * self.generation.cores_per_chip

  @property
  def topology(self) -> str:
    """libtpu's name of the slice, e.g. 'v3:2x2'."""
    return f"{self.generation.name}:{'x'.join(map(str, self.shape))}"

  @property
  def peak_flops_per_device(self) -> float:
    return self.generation.peak_tflops_per_chip * 1e12 / self.generation.devices_per_chip


def torus_shape(chips: int, dims: int) -> Tuple[int, ...]:
  """Cloud's slice shapes: as square (cubic) as the chip count allows, larger sides last
  (v3-32: 4x4, v3-64: 4x8; v4-8: 2x2x1, v4-32: 2x2x4, v4-64: 2x4x4)."""
  if chips < 1 or chips & (chips - 1):
    raise ValueError(f"{chips} chips: not a power of two")
  exponent = int(math.log2(chips))
  if dims == 3 and chips < 8:
    return (*torus_shape(chips, 2), 1)
  base, extra = divmod(exponent, dims)
  return tuple(2 ** (base + (i >= dims - extra)) for i in range(dims))


def parse(name: str) -> Slice:
  """A slice from Cloud's accelerator type (`v3-8`) or a raw topology (`v3:4x4`)."""
  text = name.strip().lower()
  raw = re.fullmatch(r"(v\d+[a-z]*):(\d+(?:x\d+)+)", text)
  sold = re.fullmatch(r"(v\d+[a-z]*)-(\d+)", text)
  prefix = (raw or sold).group(1) if (raw or sold) else None
  generation = GENERATIONS.get(ALIASES.get(prefix, prefix))
  if generation is None:
    raise errors.InvalidInput(f"--tpu={name} is not a TPU slice this tool knows: use one of "
                              f"{EXAMPLES}")
  if raw:
    shape = tuple(int(side) for side in raw.group(2).split("x"))
    if len(shape) != generation.dims or min(shape) < 1:
      raise errors.InvalidInput(f"--tpu={name}: a {generation.name} topology has "
                                f"{generation.dims} sides, e.g. {_example(generation)}")
    return Slice(name, generation, shape)
  count = int(sold.group(2))
  per_chip = generation.cores_per_chip if generation.name_counts_cores else 1
  chips = count // per_chip
  if count % per_chip or chips < 1 or chips & (chips - 1) or (
      generation.name_counts_cores and chips < 4):
    unit = "cores" if generation.name_counts_cores else "chips"
    raise errors.InvalidInput(
        f"--tpu={name}: {prefix} slices are sold as {prefix}-N with N {unit} a power of two"
        f"{' from 8' if generation.name_counts_cores else ''}, e.g. {prefix}-8")
  return Slice(name, generation, torus_shape(chips, generation.dims))


def _example(generation: Generation) -> str:
  return f"{generation.name}:{'x'.join(['2'] * 2 + ['1'] * (generation.dims - 2))}"


def compile_only_devices(tpu_slice: Slice) -> list:
  """The devices of `tpu_slice` for ahead-of-time compilation; nothing runs on them."""
  os.environ.setdefault("TPU_SKIP_MDS_QUERY", "1")  # no metadata-server lookup off Cloud
  if not platforms.tpu_attached():  # no chip to guard: other processes may compile too
    os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
  try:
    import libtpu  # pylint: disable=unused-import,import-outside-toplevel
  except ImportError:
    raise errors.InvalidInput(
        "compiling for a TPU needs libtpu: pip install 'vit_jax[tpu]' (or "
        "pip install 'jax[tpu]'); it runs on a CPU machine, no TPU needed") from None
  import jax  # pylint: disable=import-outside-toplevel
  from jax.experimental import topologies  # pylint: disable=import-outside-toplevel
  try:
    with platforms.quiet_stderr():
      topology = topologies.get_topology_desc(
          platform="tpu", topology_name=tpu_slice.topology,
          chip_config_name=tpu_slice.generation.chip_config)
  except jax.errors.JaxRuntimeError as e:  # libtpu's INVALID_ARGUMENT: a shape it has not
    if "INVALID_ARGUMENT" not in str(e):  # (v3:3x3 is not a whole number of 2x2 hosts)
      raise
    reason = " ".join(str(e).replace("INVALID_ARGUMENT:", "").split())
    raise errors.InvalidInput(f"--tpu={tpu_slice.name}: libtpu has no such slice ({reason}): "
                              f"use one of {EXAMPLES}") from None
  return list(topology.devices)
