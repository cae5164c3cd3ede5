"""tf.data over an IndexedSplit: the rows a function of the batch id names, gathered in
numpy, and the one-line error naming the image when a batch fails to decode (TF's names
no file). The hot path pays nothing for the naming: only a failed batch is made again."""

import itertools
from typing import Iterator

import tensorflow as tf

from vit_jax.data.splits import IndexedSplit


def read_rows(split: IndexedSplit, row_indices, batch_ids: tf.data.Dataset,
              text_ids=None) -> tf.data.Dataset:
  """Examples (position, data, label[, text]) of the batches `batch_ids`; see read_batches."""
  return read_batches(split, row_indices, batch_ids, text_ids).unbatch()


def read_batches(split: IndexedSplit, row_indices, batch_ids: tf.data.Dataset,
                 text_ids=None) -> tf.data.Dataset:
  """The rows (positions, data, labels) of each batch of `batch_ids`; row_indices(batch_id)
  gives their (positions, indices). The gather runs in numpy, once per batch, so the
  split never becomes a (size-limited) constant in the TF graph. With text_ids
  (captions.TextIds) the rows add their captions' token ids, computed there too (the Grain
  loader calls the same function)."""
  dtypes = [tf.int64, tf.uint8 if split.kind == "pixels" else tf.string, tf.int32]
  shapes = [[None], [None, *split.data.shape[1:]], [None, *split.labels.shape[1:]]]
  if text_ids is not None:
    dtypes.append(tf.int32)
    shapes.append([None, text_ids.length])

  def gather(batch_id):
    positions, indices = row_indices(int(batch_id))
    rows = (positions, split.data[indices], split.labels[indices])
    return rows if text_ids is None else (*rows, text_ids(positions, indices))

  def read(batch_id):
    rows = tf.numpy_function(gather, [batch_id], dtypes, stateful=False)
    return tuple(tf.ensure_shape(row, shape) for row, shape in zip(rows, shapes))

  return batch_ids.map(read)


# What a bad input image makes tf.data raise: undecodable bytes, a file gone missing.
_IMAGE_ERRORS = (tf.errors.InvalidArgumentError, tf.errors.NotFoundError,
                 tf.errors.DataLossError)


def naming_bad_images(iterator: Iterator[dict], split: IndexedSplit, row_indices,
                      first_batch: int, example_fn) -> Iterator[dict]:
  """The batches of `iterator` (ids first_batch, first_batch + 1, ...), where a batch that
  fails on an image raises a one-line error naming it instead of TF's, which names no
  file. Nothing is checked while batches flow: only a failed batch is made again, example
  by example, with example_fn(position, data, label) (stateless seeds: it fails the same;
  text is left out, it reads no image)."""
  for batch_id in itertools.count(first_batch):
    try:
      batch = next(iterator)
    except StopIteration:
      return
    except _IMAGE_ERRORS as error:
      positions, indices = row_indices(batch_id)
      for position, index in zip(positions, indices):
        try:
          example_fn(tf.constant(position), tf.constant(split.data[index]),
                     tf.constant(split.labels[index]))
        except _IMAGE_ERRORS as example_error:
          raise split.image_error(int(index), example_error) from error
      raise
    yield batch
