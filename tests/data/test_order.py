"""The data order: process rows tile the global batch, epochs are permutations, seeds
depend on what they name only."""

import numpy as np

from vit_jax.data import order


def test_the_rows_of_every_process_tile_the_global_batch():
  for process_count in (1, 2, 4):
    rows = [order.row_positions(3, 8, p, process_count) for p in range(process_count)]
    np.testing.assert_array_equal(np.concatenate(rows), np.arange(24, 32))


def test_a_batch_across_an_epoch_boundary_reads_both_epochs():
  indices = order.stream_indices(7, np.arange(6, 14), size=10)  # epoch 0: 6-9, epoch 1: 0-3
  np.testing.assert_array_equal(indices[:4], order.epoch_permutation(7, 0, 10)[6:])
  np.testing.assert_array_equal(indices[4:], order.epoch_permutation(7, 1, 10)[:4])
  assert sorted(order.stream_indices(7, np.arange(10, 20), size=10)) == list(range(10))
  assert list(order.epoch_permutation(7, 0, 10)) != list(order.epoch_permutation(7, 1, 10))


def test_seeds_depend_on_their_inputs_only():
  assert order.shuffle_seed(0, 5, 1) == order.shuffle_seed(0, 5, 1)
  assert len({order.shuffle_seed(0, 5, 1), order.shuffle_seed(0, 6, 1),
              order.shuffle_seed(0, 5, 0)}) == 3  # a resumed run or another process reshuffles
  seeds = [order.example_seed(1, 4), order.mixup_seed(1, 4), order.batch_uniforms_seed(1, 4)]
  assert len({tuple(seed.numpy()) for seed in seeds}) == 3  # one stream per use
  np.testing.assert_array_equal(order.example_seed(1, 4), order.example_seed(1, 4))


def test_caption_choice_is_seeded_by_position_and_varies_across_steps():
  picks = [order.caption_choice(3, position, 5) for position in range(40)]
  assert picks == [order.caption_choice(3, position, 5) for position in range(40)]
  assert set(picks) == set(range(5))
  assert picks != [order.caption_choice(4, position, 5) for position in range(40)]
  assert order.caption_choice(3, 7, 1) == 0
