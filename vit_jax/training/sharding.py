"""Device mesh from config, and where batches and parameters live on it.

The mesh always has the three named axes `data`, `fsdp` and `tensor` (size 1 when
unused), so partition specs never depend on which parallelism a run picked.
Batches are split over `data` x `fsdp`. Parameters (and the optimizer state, whose
leaves carry the same names) follow rules keyed on their names:
  * tensor parallel (Megatron): the family's tensor rules (TrainingRules) split over
    `tensor`, for a ViT attention heads and the MLP hidden units, so each device holds
    whole heads and a slice of the MLP;
  * FSDP: the largest still-unsplit dimension divisible by `fsdp` of every tensor with
    at least FSDP_MIN_SIZE elements is split over `fsdp`;
  * everything else is replicated.
"""

import functools
import math
import re
from typing import Any, Dict, Mapping, Optional, Sequence, Tuple

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from vit_jax.base import errors
from vit_jax.models import family_registry
from vit_jax.training import param_rules

AXES = ("data", "fsdp", "tensor")
BATCH_AXES = ("data", "fsdp")


class ShardingError(errors.InvalidInput):
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


def on_mesh(mesh: Mesh, fn):
  """fn traced with `mesh` as the abstract mesh: model code that has to split its work by
  hand (the Pallas attention kernel, which XLA cannot partition) and choose kernels by
  platform (vit_jax.models.attention) sees where the program will run."""

  @functools.wraps(fn)
  def traced(*args, **kwargs):
    with jax.sharding.use_abstract_mesh(mesh.abstract_mesh):
      return fn(*args, **kwargs)

  return traced


def batch_sharding(mesh: Mesh) -> NamedSharding:
  return NamedSharding(mesh, P(BATCH_AXES))


def replicated(mesh: Mesh) -> NamedSharding:
  return NamedSharding(mesh, P())


def put(tree: Any, shardings: Any) -> Any:
  """Host values that every process holds alike (a seed, loaded weights) placed on
  `shardings`, each process copying in only its own devices' slices. jax.device_put onto
  devices of several processes first gathers every value from all of them to check that
  they agree: a compiled all-gather per array, seconds per run on CPU hosts and the whole
  model's weights over the network on a pod."""
  def put_one(value, sharding):
    if isinstance(value, jax.Array) and not value.is_fully_addressable:
      return jax.device_put(value, sharding)  # already global: a reshard
    host = np.asarray(value)
    return jax.make_array_from_callback(host.shape, sharding, lambda index: host[index])
  return jax.tree.map(put_one, tree, shardings)


def to_host(tree: Any) -> Any:
  """The whole value of every array of `tree` (placed on one mesh) as numpy, on every
  process. One compiled gather for the whole tree: multihost_utils.process_allgather
  compiles one per array, hundreds for a large ViT at the end of every run on a pod."""
  if jax.process_count() == 1:
    return jax.device_get(tree)
  mesh = jax.tree.leaves(tree)[0].sharding.mesh
  whole = jax.jit(lambda t: t, out_shardings=replicated(mesh))(tree)
  return jax.tree.map(lambda x: np.asarray(x.addressable_data(0)), whole)


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


def check_config_batches(config, mesh: Mesh) -> None:
  """config.batch, batch_eval and the micro-batch (batch / accum_steps) must each split
  evenly over the devices and processes."""
  check_batch_size(config.batch, mesh, "batch")
  check_batch_size(config.batch_eval, mesh, "batch_eval")
  if config.batch % config.accum_steps:
    raise ShardingError(f"config.accum_steps={config.accum_steps} does not divide "
                        f"config.batch={config.batch}: pick a divisor of the batch")
  check_batch_size(config.batch // config.accum_steps, mesh,
                   "batch / config.accum_steps (the micro-batch)")


FSDP_MIN_SIZE = 2**16  # smaller tensors cost more to gather than they save


def path_name(path: Tuple[Any, ...]) -> str:
  """'/'-joined names of a pytree path (dict keys, attributes, sequence indices): the
  names the partition rules and vit_jax.training.param_groups' regexes match."""
  return jax.tree_util.keystr(path, simple=True, separator="/")


def partition_spec(name: str, shape: Sequence[int], axis_sizes: Mapping[str, int]) -> P:
  """Where each dimension of the leaf `name` of `shape` lives on the mesh: the first tensor
  rule of the families' that the name and rank match (scan-stacked blocks keep their
  leading depth axis whole), then FSDP."""
  dims = [None] * len(shape)
  families = param_rules.of_every_family()
  stacked = int(any(param_rules.is_stacked(rules, name) for rules in families))
  if axis_sizes.get("tensor", 1) > 1:
    tensor_rules = [rule for rules in families for rule in rules.tensor_rules]
    for pattern, axes in tensor_rules:
      if re.search(pattern, name) and len(axes) + stacked == len(shape):
        dims = [None] * stacked + list(axes)
        break
  fsdp = axis_sizes.get("fsdp", 1)
  if fsdp > 1 and math.prod(shape) >= FSDP_MIN_SIZE:
    free = [i for i, size in enumerate(shape)
            if i >= stacked and dims[i] is None and size % fsdp == 0]
    if free:
      dims[max(free, key=lambda i: shape[i])] = "fsdp"
  return P(*dims)


def param_shardings(abstract_tree: Any, mesh: Mesh) -> Any:
  """NamedShardings for a parameter or train-state tree, leaf by leaf (partition_spec)."""
  sizes = dict(mesh.shape)
  return jax.tree_util.tree_map_with_path(
      lambda path, leaf: NamedSharding(
          mesh, partition_spec(path_name(path), getattr(leaf, "shape", ()), sizes)),
      abstract_tree)


def check_model_tensor_parallel(module: Any, mesh: Mesh) -> None:
  """The `tensor` axis must divide the widths the module's family splits over it (a ViT's
  heads and MLP units), checked before compiling."""
  widths, named = family_registry.for_module(module).part(
      "training", type(module).__name__).tensor_widths(module)
  tensor = mesh.shape["tensor"]
  if any(width % tensor for width in widths):
    divisors = [d for d in range(1, widths[0] + 1) if not any(w % d for w in widths)]
    raise ShardingError(f"mesh tensor={tensor} does not divide {named}: use "
                        f"config.mesh.tensor in {divisors}")
