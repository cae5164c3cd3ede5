"""config.grain_workers, checked with the loader keys: bounded by the usable cores and
refused with the tf loader, each in one line."""

import os

import pytest

from helpers import make_config
from vit_jax.base import errors
from vit_jax.data import datasets, worker_limit


def _config(workers, loader="grain"):
  config = make_config()
  config.loader, config.grain_workers = loader, workers
  return config


def test_more_workers_than_usable_cores_is_one_line():
  cores = worker_limit.usable_cores()
  assert 1 <= cores <= os.cpu_count()
  worker_limit.check(_config(cores))  # the bound itself is fine
  with pytest.raises(errors.InvalidInput, match=(
      f"config.grain_workers=10000 is more than the {cores} CPU cores this process may "
      f"use; set it to at most {cores}$")):
    datasets.check(_config(10000), 4)


@pytest.mark.parametrize("workers", [-1, 1.5, True])
def test_a_worker_count_that_is_not_a_count_is_one_line(workers):
  with pytest.raises(errors.InvalidInput, match=r"must be >= 0 \(0: no worker processes\)"):
    datasets.check(_config(workers), 4)


def test_workers_with_the_tf_loader_are_refused():
  with pytest.raises(errors.InvalidInput, match=(
      "config.grain_workers=1 starts worker processes of the Grain loader only; set "
      "config.loader='grain', or config.grain_workers=0 with config.loader='tf'")):
    datasets.check(_config(1, loader="tf"), 4)
