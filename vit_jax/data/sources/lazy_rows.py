"""Examples a reader fetches one at a time by index (a record, a byte range of a shard),
shaped as the column of an IndexedSplit: Grain asks one index, the tf stack gathers an
index array in numpy (tf_stack/indexed_reader), which gets an object array of bytes."""

import abc

import numpy as np


class Rows(abc.ABC):
  """A column of encoded images read on demand; subclasses give __len__ and read(i)."""

  @abc.abstractmethod
  def __len__(self) -> int:
    """The number of examples."""

  @abc.abstractmethod
  def read(self, index: int) -> bytes:
    """Example `index`'s encoded image."""

  @property
  def shape(self):
    return (len(self),)

  def __getitem__(self, index):
    if np.ndim(index) == 0:
      return self.read(int(index))
    rows = np.empty(len(index), object)
    for k, i in enumerate(index):
      rows[k] = self.read(int(i))
    return rows
