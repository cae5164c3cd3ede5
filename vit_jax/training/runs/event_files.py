"""TensorBoard event files on object stores, written without appends.

TensorFlow's summary writer appends to one event file, which an object store can only
imitate by uploading the whole file again at every flush (a cost that grows with the run),
and it goes through tf.io.gfile, whose GCS client cannot be pointed at any other endpoint
(so no test could see it). Here every write becomes its own small event file, uploaded
once through vit_jax/base/storage.py: TensorBoard reads all `events.out.tfevents.*` files of a
folder in name order, so the sequence numbers keep the steps in order. Local workdirs keep clu's
TensorFlow writer.
"""

import io
import itertools
import os
import socket
import time
from typing import Any, Mapping

from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.summary.writer import event_file_writer, record_writer

from vit_jax.base import storage
from vit_jax.training.runs.scalar_writer import ScalarWriter

_WRITERS = itertools.count()


def scalars_event(step: int, scalars: Mapping[str, Any]) -> event_pb2.Event:
  values = [summary_pb2.Summary.Value(tag=name, simple_value=float(value))
            for name, value in scalars.items()]
  return event_pb2.Event(wall_time=time.time(), step=int(step),
                         summary=summary_pb2.Summary(value=values))


class LocalEventWriter(ScalarWriter):
  """Scalars as TensorBoard events in one local file, through tensorboard's own writer:
  no TensorFlow (runs of the Grain loader). Texts and hparams are in metrics.jsonl."""

  def __init__(self, logdir: str):
    self._events = event_file_writer.EventFileWriter(logdir)

  def write_scalars(self, step: int, scalars: Mapping[str, Any]):
    self._events.add_event(scalars_event(step, scalars))

  def write_texts(self, step, texts):
    """Texts are in metrics.jsonl."""

  def write_hparams(self, hparams):
    """Hyperparameters are in metrics.jsonl and config.json."""

  def flush(self):
    self._events.flush()

  def close(self):
    self._events.close()


class SegmentedEventWriter(ScalarWriter):
  """Scalars as TensorBoard events, one uploaded file per write; other kinds are not
  needed by the train loop and are left out (metrics.jsonl keeps texts and hparams)."""

  def __init__(self, logdir: str):
    self._logdir = logdir
    # Unique per writer (a restart in the same second, another writer in this process),
    # and sorting by time first, so TensorBoard reads the writes in order.
    self._prefix = (f"events.out.tfevents.{int(time.time()):010d}.{socket.gethostname()}."
                    f"{os.getpid()}.{next(_WRITERS):03d}")
    self._sequence = 0

  def _upload(self, events) -> None:
    buffer = io.BytesIO()
    records = record_writer.RecordWriter(buffer)
    records.write(event_pb2.Event(wall_time=time.time(), file_version="brain.Event:2")
                  .SerializeToString())
    for event in events:
      records.write(event.SerializeToString())
    self._sequence += 1
    storage.write_atomic(storage.join(self._logdir, f"{self._prefix}.{self._sequence:06d}.v2"),
                         buffer.getvalue())

  def write_scalars(self, step: int, scalars: Mapping[str, Any]):
    self._upload([scalars_event(step, scalars)])

  def write_texts(self, step, texts):
    """Texts are in metrics.jsonl."""

  def write_hparams(self, hparams):
    """Hyperparameters are in metrics.jsonl and config.json."""

  def flush(self):
    """Every write is already uploaded."""

  def close(self):
    """Nothing is held open."""
