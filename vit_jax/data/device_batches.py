"""From this process's host batches to global device batches: jax Arrays laid out over
the mesh, made ahead on a background thread so that the copies overlap the train steps."""

import queue
import threading
from typing import Iterator

import jax
import numpy as np


def to_global(batch: dict, sharding: jax.sharding.Sharding) -> dict:
  """This process's rows -> global jax Arrays laid out over the mesh's batch axes (every
  array of a nested batch: a NaFlex image's patches, mask and grid)."""
  return jax.tree.map(
      lambda value: jax.make_array_from_process_local_data(sharding, np.asarray(value)), batch)


def prefetch_to_device(iterator: Iterator[dict], sharding: jax.sharding.Sharding,
                       size: int = 2) -> Iterator[dict]:
  """Keeps `size` global device batches ready, made by a background thread so that
  host-to-device copies overlap the train steps. Errors resurface in the consumer."""
  ready = queue.Queue(maxsize=size)
  stop = threading.Event()
  end = object()

  def put(item) -> bool:
    """Waits for room, giving up when the consumer has gone."""
    while not stop.is_set():
      try:
        ready.put(item, timeout=0.1)
        return True
      except queue.Full:
        pass
    return False

  def fill():
    try:
      for batch in iterator:
        if not put(to_global(batch, sharding)):
          return
      put(end)
    except Exception as e:  # pylint: disable=broad-except  # re-raised by the consumer
      put(e)

  producer = threading.Thread(target=fill, daemon=True)
  producer.start()
  try:
    while (item := ready.get()) is not end:
      if isinstance(item, Exception):
        raise item
      yield item
  finally:  # close(): let the producer finish its batch, so no tf.data work outlives us
    stop.set()
    producer.join(timeout=60)
