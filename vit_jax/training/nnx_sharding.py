"""The main job's parameter placement (vit_jax.training.sharding: the families' tensor rules,
then FSDP) as Flax NNX sharding annotations: every nnx.Param of a vit_jax.nnx model gets the
`out_sharding` and `mesh` metadata nnx.with_partitioning would give it, so that
nnx.get_partition_spec, nnx.get_named_sharding and the nnx.Optimizer's state (which copies
a parameter's metadata) follow the same layout as a main-job run on that mesh."""

from typing import Any

import jax
from flax import nnx
from jax.sharding import Mesh

from vit_jax.models import nnx_bridge
from vit_jax.training import sharding


def annotate(model: Any, mesh: Mesh) -> Any:
  """Sets each parameter's out_sharding (the PartitionSpec sharding.partition_spec gives its
  Linen name on this mesh) and mesh; a tensor axis that does not divide the model's widths
  is one line (sharding.ShardingError). Returns the model."""
  module, _ = nnx_bridge.to_linen(model)
  if set(mesh.axis_names) != set(sharding.AXES):
    raise sharding.ShardingError(
        f"the rules place parameters on a mesh of the axes {', '.join(sharding.AXES)}, got "
        f"{', '.join(mesh.axis_names)}: make it with vit_jax.nnx.make_mesh({{'data': -1}})")
  sharding.check_model_tensor_parallel(module, mesh)
  sizes = dict(mesh.shape)
  for path, variable in nnx.iter_graph(model):
    if isinstance(variable, nnx.Param):
      spec = sharding.partition_spec("/".join(map(str, path)), variable.shape, sizes)
      variable.set_metadata(out_sharding=tuple(spec), mesh=mesh)
  return model


def shard(model: Any, mesh: Mesh) -> Any:
  """annotate, then every variable placed on the mesh as annotated (the rest replicated).
  Returns the model."""
  annotate(model, mesh)
  state = nnx.state(model)
  nnx.update(model, jax.device_put(state, nnx.get_named_sharding(state, mesh)))
  return model
