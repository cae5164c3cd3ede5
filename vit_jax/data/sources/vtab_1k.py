"""VTAB-1k tasks as a source: 'vtab/<task>', or an image folder read with VTAB-1k split
names; told without TensorFlow, read by tf.data only (their labels are TensorFlow
functions of the features: vtab_tasks, imported when one is opened)."""

# pylint: disable=import-outside-toplevel  # vtab_tasks imports TensorFlow: only to open one

import os

from vit_jax.data import VTAB_PREFIX, VTAB_SELECTIONS
from vit_jax.data.sources import image_folder, source_contract


class VtabTask:
  """A VTAB-1k task (vit_jax.data.sources.vtab_tasks)."""
  loaders = ("tf",)
  takes_label_feature = False

  def handles(self, config) -> bool:
    """'vtab/<task>', or an image directory read with VTAB-1k split names (train800,
    val200, train800val200)."""
    if config.dataset.startswith(VTAB_PREFIX):
      return True
    return os.path.isdir(os.path.expanduser(config.dataset)) and bool(
        {config.train_split, config.eval_split} & VTAB_SELECTIONS)

  def open(self, config, loader):
    source_contract.check_loader(self, loader, f"config.dataset={config.dataset!r}: VTAB "
                                 "tasks are read by tf.data; set config.loader='tf'")
    from vit_jax.data.sources import vtab_tasks
    return vtab_tasks.open_task(config)

  def class_count(self, config) -> int:
    if not config.dataset.startswith(VTAB_PREFIX):
      return image_folder.SOURCE.class_count(config)
    from vit_jax.data.sources import vtab_tasks
    return vtab_tasks.get_task(config.dataset[len(VTAB_PREFIX):]).num_classes

  def open_eval(self, name, split, config, label_feature, loader):
    return None  # a task's splits are selections of its training run


SOURCE = VtabTask()
