"""vit_jax.data.batch_spec: the shapes and dtypes the plan compiles for are those of the
batches both loaders really feed (train, with and without MixUp, and eval)."""

import numpy as np
import pytest

from vit_jax.data import batch_spec, loaders
from vit_jax.training import config_defaults


def as_spec(batch) -> dict:
  return {key: (tuple(value.shape), np.asarray(value).dtype) for key, value in batch.items()}


@pytest.mark.parametrize("loader", ["tf", "grain"])
@pytest.mark.parametrize("mixup_alpha", [0.0, 0.2])
def test_the_spec_is_what_the_loaders_feed(loader, mixup_alpha):
  config = config_defaults.demo_config()
  config.loader, config.pp.mixup_alpha = loader, mixup_alpha
  dataset = loaders.open_dataset(config)
  num_classes = dataset.info.num_classes
  train = next(iter(dataset.train_batches(batch_size=8, start_step=0, num_steps=1, seed=0,
                                          process_index=0, process_count=1)))
  assert as_spec(train) == batch_spec.train_batch(config, num_classes, 8)
  evaluated = next(iter(dataset.eval_batches(batch_size=8, process_index=0, process_count=1)))
  assert as_spec(evaluated) == batch_spec.eval_batch(config, 8)
