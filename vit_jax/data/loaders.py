"""Opening config.dataset with the input pipeline config.loader names: 'tf' (tf.data,
vit_jax.data.tf_stack.tf_pipeline) or 'grain' (Grain, no TensorFlow:
vit_jax.data.grain_stack.grain_pipeline). Only the chosen pipeline is imported."""

from typing import Optional

from vit_jax.base import cli, errors
from vit_jax.data.datasets import Dataset, DatasetInfo, check  # noqa: F401 (the API)


def _loader(config):
  if config.get("loader", "tf") == "grain":
    from vit_jax.data.grain_stack import grain_pipeline  # pylint: disable=import-outside-toplevel
    return grain_pipeline
  try:
    from vit_jax.data.tf_stack import tf_pipeline  # pylint: disable=import-outside-toplevel
  except ImportError as e:
    if (e.name or "").split(".")[0] not in ("tensorflow", "tensorflow_datasets"):
      raise
    raise errors.InvalidInput(cli.NO_TENSORFLOW) from None
  return tf_pipeline


def open_dataset(config, patch_size: Optional[int] = None) -> Dataset:
  """The dataset of config.dataset, read by config.loader's pipeline (open_dataset there).
  With config.pp.max_patches (NaFlex) give the model's patch_size (models.model_config.patch_size;
  data/ cannot import models/, which imports data/)."""
  return _loader(config).open_dataset(config, patch_size)


def open_eval_dataset(config, dataset: str, split: str, label_feature: str = "label",
                      patch_size: Optional[int] = None) -> Dataset:
  """An evaluation-only Dataset of `dataset`'s `split`, read by config.loader's pipeline."""
  return _loader(config).open_eval_dataset(config, dataset, split, label_feature, patch_size)
