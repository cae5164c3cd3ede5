"""Device mesh from config, and where batches and parameters live on it.

The mesh always has the three named axes `data`, `fsdp` and `tensor` (size 1 when
unused), so partition specs never depend on which parallelism a run picked.
Batches are split over `data` x `fsdp`.
"""

import math
from typing import Any, Dict, Mapping, Optional, Sequence

import jax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

AXES = ("data", "fsdp", "tensor")
BATCH_AXES = ("data", "fsdp")


class ShardingError(ValueError):
  """An impossible mesh or batch split; the message says how to fix it."""


def mesh_shape(mesh_config: Mapping[str, int], num_devices: int) -> Dict[str, int]:
  """Resolves sizes (-1 = all remaining devices) and checks they use every device."""
  unknown = sorted(set(mesh_config) - set(AXES))
  if unknown:
    raise ShardingError(f"unknown mesh axis {', '.join(unknown)}; use {', '.join(AXES)}")
  sizes = {axis: int(mesh_config.get(axis, 1)) for axis in AXES}
  free = [axis for axis, size in sizes.items() if size == -1]
  if len(free) > 1:
    raise ShardingError(f"only one mesh axis may be -1, got {', '.join(free)}")
  fixed = math.prod(size for size in sizes.values() if size != -1)
  if free:
    if fixed <= 0 or num_devices % fixed:
      raise ShardingError(f"mesh {sizes} cannot fill {num_devices} devices: make the fixed "
                          f"axis sizes divide {num_devices}")
    sizes[free[0]] = num_devices // fixed
  if math.prod(sizes.values()) != num_devices:
    raise ShardingError(
        f"mesh {sizes} has {math.prod(sizes.values())} devices but {num_devices} are "
        "available: make the sizes multiply to the device count, or set one axis to -1")
  return sizes


def make_mesh(mesh_config: Mapping[str, int],
              devices: Optional[Sequence[Any]] = None) -> Mesh:
  """A mesh over all (or the given) devices, laid out along the physical topology."""
  devices = jax.devices() if devices is None else list(devices)
  sizes = mesh_shape(mesh_config, len(devices))
  return jax.make_mesh(tuple(sizes[a] for a in AXES), AXES,
                       axis_types=(jax.sharding.AxisType.Auto,) * len(AXES), devices=devices)


def batch_sharding(mesh: Mesh) -> NamedSharding:
  return NamedSharding(mesh, P(BATCH_AXES))


def replicated(mesh: Mesh) -> NamedSharding:
  return NamedSharding(mesh, P())


def batch_parallelism(mesh: Mesh) -> int:
  return mesh.shape["data"] * mesh.shape["fsdp"]


def check_batch_size(batch_size: int, mesh: Mesh, name: str = "batch") -> None:
  """A global batch must split evenly over the batch axes and over the processes."""
  parallel = batch_parallelism(mesh)
  if batch_size % parallel:
    raise ShardingError(
        f"config.{name}={batch_size} is not divisible by the {parallel} data-parallel "
        f"devices (mesh data x fsdp): use a multiple of {parallel}, e.g. "
        f"{max(parallel, batch_size // parallel * parallel)}")
  if batch_size % jax.process_count():
    raise ShardingError(f"config.{name}={batch_size} is not divisible by the "
                        f"{jax.process_count()} processes: use a multiple of it")


def param_shardings(abstract_tree: Any, mesh: Mesh) -> Any:
  """Shardings for parameters (or any state tree): replicated on every device."""
  return jax.tree.map(lambda _: replicated(mesh), abstract_tree)
