"""Cloud's slice names -> libtpu topologies, checked against libtpu's own devices."""

import pytest

from vit_jax.base import errors
from vit_jax.planning import tpu_slices

pytest.importorskip("libtpu", reason="compiling for TPUs needs libtpu (the test extra)")


@pytest.mark.parametrize("name,topology,devices,chips,cores", [
    ("v2-8", "v2:2x2", 8, 4, 8),
    ("v3-8", "v3:2x2", 8, 4, 8),
    ("v3-32", "v3:4x4", 32, 16, 32),
    ("v3-64", "v3:4x8", 64, 32, 64),
    ("v3-256", "v3:8x16", 256, 128, 256),
    ("v3-2048", "v3:32x32", 2048, 1024, 2048),
    ("v4-8", "v4:2x2x1", 4, 4, 8),
    ("v4-32", "v4:2x2x4", 16, 16, 32),
    ("v4-64", "v4:2x4x4", 32, 32, 64),
    ("v5p-8", "v5p:2x2x1", 4, 4, 8),
    ("v5e-8", "v5e:2x4", 8, 8, 8),
    ("v5litepod-16", "v5e:4x4", 16, 16, 16),
    ("v6e-8", "v6e:2x4", 8, 8, 8),
    ("V3:4x4", "v3:4x4", 32, 16, 32),
])
def test_cloud_names_become_topologies(name, topology, devices, chips, cores):
  tpu = tpu_slices.parse(name)
  assert (tpu.topology, tpu.num_devices, tpu.chips, tpu.cores) == (topology, devices, chips,
                                                                    cores)


@pytest.mark.parametrize("name,says", [
    ("v3-6", "power of two from 8"), ("v3-4", "power of two from 8"), ("v9-8", "v3-8"),
    ("tpu", "v3-8"), ("v3:2x2x2", "2 sides"), ("v4:2x2", "3 sides, e.g. v4:2x2x1"),
    ("v5e-3", "power of two"), ("", "v3-8"),
])
def test_names_that_are_not_slices_are_refused_with_examples(name, says):
  with pytest.raises(errors.InvalidInput, match=says):
    tpu_slices.parse(name)


@pytest.mark.parametrize("name", ["v3-8", "v4-8", "v5e-4", "v2-8"])
def test_the_device_counts_are_libtpus(name):
  """The table's devices per chip are what libtpu builds for the topology."""
  tpu = tpu_slices.parse(name)
  devices = tpu_slices.compile_only_devices(tpu)
  assert len(devices) == tpu.num_devices
  assert devices[0].platform == "tpu"
  assert devices[0].device_kind == tpu.generation.device_kind


@pytest.mark.parametrize("name", ["v3:3x3", "v5e:1x2"])
def test_topologies_libtpu_refuses_are_one_line(name):
  """Two sides parse, but libtpu builds no such slice (not whole 2x2 hosts): a user error."""
  with pytest.raises(errors.InvalidInput, match=f"--tpu={name}: libtpu has no such slice"):
    tpu_slices.compile_only_devices(tpu_slices.parse(name))
