"""The data order: which example a step reads, and the seeds of its augmentation.

For splits read by index the order is a function of (seed, batch size B, step) alone, so
a run resumes exactly at any step on any topology:
  * epoch e is the permutation np.random.default_rng([seed, e]) of the examples, epochs
    are concatenated into one stream, and step s takes stream positions [s*B, (s+1)*B);
  * process p of P reads rows [p*B/P, (p+1)*B/P) of every global batch;
  * the augmentation of the example at stream position x is seeded by (seed, x), and
    MixUp draws one lambda per step, the same in every process (tf.data: stateless TF
    seeds; the Grain loader: numpy Generators seeded the same way, *_rng below);
  * an example with several captions is trained at stream position x on the one
    caption_choice(seed, x, count) draws (numpy in both loaders).
Streamed splits only take a shuffle seed, which includes the start step (a resumed run
reshuffles rather than replays).
"""

import functools

import numpy as np


def row_positions(step: int, batch_size: int, process_index: int,
                  process_count: int) -> np.ndarray:
  """Stream positions of this process's rows of the global batch of `step`."""
  rows = batch_size // process_count
  return step * batch_size + process_index * rows + np.arange(rows, dtype=np.int64)


@functools.lru_cache(maxsize=4)
def epoch_permutation(seed: int, epoch: int, size: int) -> np.ndarray:
  return np.random.default_rng([seed, epoch]).permutation(size)


def stream_indices(seed: int, positions: np.ndarray, size: int) -> np.ndarray:
  """Example index at each stream position (a batch may straddle two epochs)."""
  epochs, offsets = np.divmod(positions, size)
  indices = np.empty_like(positions)
  for epoch in np.unique(epochs):
    here = epochs == epoch
    indices[here] = epoch_permutation(seed, int(epoch), size)[offsets[here]]
  return indices


def example_seed(seed: int, position):
  """Augmentation seed of the example at a stream position."""
  import tensorflow as tf  # the tf.data loader only
  return tf.random.experimental.stateless_fold_in(tf.constant([seed, 0], tf.int64), position)


def batch_uniforms_seed(seed: int, step):
  """Seed of the per-row uniforms of a step's global batch (batched augmentation)."""
  import tensorflow as tf  # the tf.data loader only
  return tf.random.experimental.stateless_fold_in(tf.constant([seed, 2], tf.int64), step)


def mixup_seed(seed: int, step):
  """MixUp seed of a step: the same in every process."""
  import tensorflow as tf  # the tf.data loader only
  return tf.random.experimental.stateless_fold_in(tf.constant([seed, 1], tf.int64), step)


def example_rng(seed: int, position: int) -> np.random.Generator:
  """Augmentation randomness of the example at a stream position (Grain loader)."""
  return np.random.default_rng([seed, 0, position])


def mixup_rng(seed: int, step: int) -> np.random.Generator:
  """MixUp randomness of a step, the same in every process (Grain loader)."""
  return np.random.default_rng([seed, 1, step])


def caption_choice(seed: int, position: int, count: int) -> int:
  """Which of its `count` captions the example at a stream position is trained on (tag 3:
  independent of its augmentation's draws)."""
  if count == 1:
    return 0
  return int(np.random.default_rng([seed, 3, int(position)]).integers(count))


def shuffle_seed(seed: int, start_step: int, process_index: int) -> int:
  """Streaming shuffle seed: a resumed run reshuffles instead of replaying the stream."""
  return int(np.random.SeedSequence([seed, start_step, process_index]).generate_state(1)[0])
