"""vit_jax.data.batch_spec: the shapes and dtypes the plan compiles for are those of the
batches both loaders really feed (train, with and without MixUp, and eval; with captions)."""

import numpy as np
import pytest

from vit_jax.data import batch_spec, loaders, text_tokens
from vit_jax.models import model_config
from vit_jax.training import config_defaults


def as_spec(batch) -> dict:
  return {key: as_spec(value) if isinstance(value, dict)
          else (tuple(value.shape), np.asarray(value).dtype) for key, value in batch.items()}


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


def test_a_naflex_spec_nests_patches_mask_and_grid():
  """pp.max_patches: the image is {'patches', 'mask', 'grid'} at the budget and the model's
  patch size (the loaders' side: the next test)."""
  config = config_defaults.demo_config()
  config.pp.max_patches = 36
  image = {"patches": ((4, 36, 4 * 4 * 3), np.dtype(np.float32)),
           "mask": ((4, 36), np.dtype(np.int32)), "grid": ((4, 2), np.dtype(np.int32))}
  assert batch_spec.train_batch(config, 10, 4, patch_size=4) == {
      "image": image, "label": ((4,), np.dtype(np.int32))}
  assert batch_spec.eval_batch(config, 4, patch_size=4)["image"] == image
  zeros = batch_spec.map_arrays(np.zeros, batch_spec.eval_batch(config, 4, patch_size=4))
  assert zeros["image"]["grid"].dtype == np.int32 and zeros["mask"].shape == (4,)
  with pytest.raises(ValueError, match="patch size"):
    batch_spec.train_batch(config, 10, 4)


@pytest.mark.parametrize("loader", ["tf", "grain"])
def test_the_naflex_spec_is_what_the_loaders_feed(loader):
  config = config_defaults.demo_config()
  config.loader, config.pp.max_patches = loader, 12
  patch = model_config.patch_size(config)
  dataset = loaders.open_dataset(config, patch)
  train = next(iter(dataset.train_batches(batch_size=4, start_step=0, num_steps=1, seed=0,
                                          process_index=0, process_count=1)))
  assert as_spec(train) == batch_spec.train_batch(config, dataset.info.num_classes, 4, patch)
  evaluated = next(iter(dataset.eval_batches(batch_size=4, process_index=0, process_count=1)))
  assert as_spec(evaluated) == batch_spec.eval_batch(config, 4, patch)


@pytest.mark.parametrize("loader", ["tf", "grain"])
def test_a_contrastive_spec_adds_the_captions_token_ids(loader, tmp_path):
  config = config_defaults.demo_config()
  config.loader, config.objective = loader, "contrastive"
  config.captions = {"templates": ("a photo of a {}.",), "class_names": None}
  config.text = {"length": 6, "lower": False, "tokenizer": text_tokens.train_wordpiece(
      ["a photo of a 0."], 50, str(tmp_path / "vocab.txt"))}
  dataset = loaders.open_dataset(config)
  train = next(iter(dataset.train_batches(batch_size=4, start_step=0, num_steps=1, seed=0,
                                          process_index=0, process_count=1)))
  assert as_spec(train) == batch_spec.train_batch(config, 10, 4)
  assert as_spec(train)["text"] == ((4, 6), np.dtype(np.int32))
  evaluated = next(iter(dataset.eval_batches(batch_size=4, process_index=0, process_count=1)))
  assert as_spec(evaluated) == batch_spec.eval_batch(config, 4)
