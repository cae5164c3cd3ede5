"""Device batches: global arrays over the mesh, prefetched, with the reader's errors."""

import jax
import numpy as np
import pytest

from vit_jax.data import device_batches


def test_to_global_and_prefetch():
  devices = jax.devices()
  sharding = jax.sharding.NamedSharding(jax.sharding.Mesh(np.array(devices), ("data",)),
                                        jax.sharding.PartitionSpec("data"))
  rows = 2 * len(devices)
  batches = [{"image": np.full((rows, 4, 4, 3), i, np.float32),
              "label": np.arange(rows, dtype=np.int32)} for i in range(3)]
  global_batch = device_batches.to_global(batches[0], sharding)
  assert global_batch["image"].shape == (rows * jax.process_count(), 4, 4, 3)
  assert global_batch["image"].sharding == sharding
  fetched = list(device_batches.prefetch_to_device(iter(batches), sharding))
  assert [float(b["image"][0, 0, 0, 0]) for b in fetched] == [0.0, 1.0, 2.0]

  def failing():
    yield batches[0]
    raise RuntimeError("reader broke")
  with pytest.raises(RuntimeError, match="reader broke"):
    list(device_batches.prefetch_to_device(failing(), sharding))
