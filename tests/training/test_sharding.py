"""Mesh construction and the batch-split checks."""

import jax
import numpy as np
import pytest

from vit_jax.models import family_registry
from vit_jax.training import sharding


@pytest.mark.parametrize("config,devices,expected", [
    ({"data": -1}, 8, {"data": 8, "fsdp": 1, "tensor": 1}),
    ({"data": -1, "fsdp": 2}, 8, {"data": 4, "fsdp": 2, "tensor": 1}),
    ({"data": 2, "tensor": 4}, 8, {"data": 2, "fsdp": 1, "tensor": 4}),
    ({"data": 1, "fsdp": -1, "tensor": 1}, 4, {"data": 1, "fsdp": 4, "tensor": 1}),
])
def test_mesh_shape_resolves_the_free_axis(config, devices, expected):
  assert sharding.mesh_shape(config, devices) == expected


@pytest.mark.parametrize("config,match", [
    ({"data": 3, "fsdp": 2}, "multiply to the device count"),
    ({"data": -1, "fsdp": 3}, "cannot fill 8 devices"),
    ({"data": -1, "fsdp": -1}, "only one mesh axis may be -1"),
    ({"dp": 8}, "unknown mesh axis dp"),
])
def test_impossible_meshes_are_one_line_errors(config, match):
  with pytest.raises(sharding.ShardingError, match=match) as e:
    sharding.mesh_shape(config, 8)
  assert "\n" not in str(e.value)


def test_make_mesh_on_the_local_devices():
  mesh = sharding.make_mesh({"data": -1})
  assert mesh.axis_names == sharding.AXES
  assert mesh.shape["data"] == jax.device_count()
  assert sharding.batch_parallelism(mesh) == jax.device_count()


def test_batch_must_divide_over_data_parallel_devices():
  mesh = jax.make_mesh((1, 1, 1), sharding.AXES,
                       axis_types=(jax.sharding.AxisType.Auto,) * 3)
  sharding.check_batch_size(7, mesh)  # one device takes any batch
  fake_mesh = type("FakeMesh", (), {"shape": {"data": 4, "fsdp": 2, "tensor": 1}})()
  with pytest.raises(sharding.ShardingError, match=r"config.batch=12 is not divisible by the 8"):
    sharding.check_batch_size(12, fake_mesh)


SIZES_TENSOR = {"data": 2, "fsdp": 1, "tensor": 4}
SIZES_FSDP = {"data": 4, "fsdp": 2, "tensor": 1}
BLOCK = "params/Transformer/encoderblock_3"


@pytest.mark.parametrize("name,shape,sizes,expected", [
    (f"{BLOCK}/MultiHeadDotProductAttention_1/query/kernel", (768, 12, 64), SIZES_TENSOR,
     (None, "tensor", None)),
    (f"{BLOCK}/MultiHeadDotProductAttention_1/value/bias", (12, 64), SIZES_TENSOR,
     ("tensor", None)),
    (f"{BLOCK}/MultiHeadDotProductAttention_1/out/kernel", (12, 64, 768), SIZES_TENSOR,
     ("tensor", None, None)),
    (f"{BLOCK}/MlpBlock_3/Dense_0/kernel", (768, 3072), SIZES_TENSOR, (None, "tensor")),
    (f"{BLOCK}/MlpBlock_3/Dense_1/kernel", (3072, 768), SIZES_TENSOR, ("tensor", None)),
    (f"{BLOCK}/MlpBlock_3/Dense_1/bias", (768,), SIZES_TENSOR, (None,)),
    (f"{BLOCK}/LayerNorm_0/scale", (768,), SIZES_TENSOR, (None,)),
    # FSDP: the largest divisible dimension of big tensors; small ones stay replicated.
    (f"{BLOCK}/MlpBlock_3/Dense_0/kernel", (768, 3072), SIZES_FSDP, (None, "fsdp")),
    ("opt_state/0/trace/Transformer/encoderblock_0/MlpBlock_3/Dense_1/kernel", (3072, 768),
     SIZES_FSDP, ("fsdp", None)),
    ("params/embedding/kernel", (16, 16, 3, 768), SIZES_FSDP, (None, None, None, "fsdp")),
    (f"{BLOCK}/LayerNorm_0/scale", (768,), SIZES_FSDP, (None,)),
    ("params/head/kernel", (768, 1001), SIZES_FSDP, ("fsdp", None)),
    # nn.scan-stacked blocks: the leading depth axis is never split.
    ("params/Transformer/encoderblock/MlpBlock_3/Dense_0/kernel", (12, 768, 3072),
     SIZES_TENSOR, (None, None, "tensor")),
    ("params/Transformer/encoderblock/MultiHeadDotProductAttention_1/out/kernel",
     (12, 12, 64, 768), SIZES_TENSOR, (None, "tensor", None, None)),
    ("opt_state/0/trace/Transformer/encoderblock/MlpBlock_3/Dense_1/kernel", (16, 3072, 768),
     SIZES_FSDP, (None, "fsdp", None)),
    # Both: tensor first, FSDP on what is left.
    (f"{BLOCK}/MlpBlock_3/Dense_0/kernel", (768, 3072), {"data": 1, "fsdp": 2, "tensor": 4},
     ("fsdp", "tensor")),
])
def test_partition_rules(name, shape, sizes, expected):
  assert sharding.partition_spec(name, shape, sizes) == jax.sharding.PartitionSpec(*expected)


def test_tensor_axis_must_divide_heads():
  fake_mesh = type("FakeMesh", (), {"shape": {"data": 2, "fsdp": 1, "tensor": 4}})()
  model = lambda name: family_registry.create_model(name, num_classes=1)
  sharding.check_model_tensor_parallel(model("ViT-B_16"), fake_mesh)  # 12 heads, 3072 units
  with pytest.raises(sharding.ShardingError,
                     match=r"tensor=4 does not divide .* 3 heads.*\[1, 3\]"):
    sharding.check_model_tensor_parallel(model("ViT-Ti_16"), fake_mesh)  # 3 heads, 768 units


def test_put_places_host_values_on_their_shardings_and_to_host_reads_them_back():
  """(Across processes, tests/test_multiprocess checks that both train what one does.)"""
  mesh = sharding.make_mesh({"data": -1})
  tree = {"kernel": np.arange(12, dtype=np.float32).reshape(3, 4), "step": np.int32(7),
          "rng": jax.random.PRNGKey(3)}
  shardings = jax.tree.map(lambda _: sharding.replicated(mesh), tree)
  placed = sharding.put(tree, shardings)
  for key, value in placed.items():
    assert value.sharding == shardings[key] and value.dtype == np.asarray(tree[key]).dtype
  back = sharding.to_host(placed)
  for key, value in tree.items():
    assert isinstance(back[key], np.ndarray)
    np.testing.assert_array_equal(back[key], np.asarray(value))
