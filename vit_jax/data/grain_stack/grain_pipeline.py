"""The Grain input pipeline (config.loader='grain'): the tf.data pipeline's batches
without TensorFlow, decoded and augmented in C (libjpeg-turbo, OpenCV) and numpy
(np_preprocess).

The order rule is tf_pipeline.py's (order.py): the example at stream position x of step s
is a function of (seed, batch size, x) alone, process p of P reads rows [p*B/P,
(p+1)*B/P) of every global batch, and the augmentation of position x draws from
order.example_rng(seed, x). So the iterator's state is the step: a run resumed at step k
(from its orbax checkpoint, after a kill too) builds the dataset from step k's positions
and sees exactly the batches an uninterrupted run would, on any topology.

As Grain datasets: a MapDataset of this process's stream positions, mapped to examples
(the order rule's permutation is the shuffle; read, decode, augment), batched, MixUp on
each batch, then an IterDataset read by threads, or by config.grain_workers worker
processes (mp_prefetch).
"""

import functools
import os
from typing import Iterator, List, Optional

import grain
import numpy as np
from absl import flags

from vit_jax.base import errors, storage
from vit_jax.data import datasets, order
from vit_jax.data.datasets import rows_per_process
from vit_jax.data.grain_stack import grain_naflex, grain_workers, np_preprocess
from vit_jax.data.sources import registry
from vit_jax.data.splits import IndexedSplit

_PREFETCH_BATCHES = 2


def _payload(split: IndexedSplit, index: int):
  """Pixels or encoded bytes of example `index` (files are read here, in the workers)."""
  data = split.data[index]
  if split.kind == "files":  # filesystem-encoded bytes (splits.IndexedSplit)
    return storage.read_bytes(os.fsdecode(data))
  return data


def _read(split: IndexedSplit, index: int, prepare):
  """prepare(payload) of one example; a bad image is one line naming it."""
  try:
    return prepare(_payload(split, index))
  except (OSError, ValueError, SyntaxError) as error:  # PIL: unreadable or truncated
    raise split.image_error(index, error) from None


def _with_text(example: dict, text_ids, position: int, index: int) -> dict:
  """The example with its caption's token ids (captions.TextIds, as tf.data computes them
  per batch), where its split has captions."""
  if text_ids is not None:
    example["text"] = text_ids(np.array([position]), np.array([index]))[0]
  return example


class _TrainExample:
  """Stream position -> {'image', 'label', 'position'} (and 'text'): the order rule's
  example, augmented (a class, not a closure: worker processes unpickle it)."""

  def __init__(self, split: IndexedSplit, pp, seed: int, batch_size: int, rows: int,
               start_step: int, process_index: int, naflex_patch: Optional[int] = None,
               text_ids=None):
    self.split, self.pp, self.seed, self.naflex_patch = split, pp, seed, naflex_patch
    self.batch_size, self.rows, self.start_step = batch_size, rows, start_step
    self.process_index, self.text_ids = process_index, text_ids

  def position(self, i: int) -> int:
    """The stream position of this process's i-th row from start_step on."""
    step, row = divmod(i, self.rows)
    return (self.start_step + step) * self.batch_size + self.process_index * self.rows + row

  def __call__(self, i: int) -> dict:
    position = self.position(int(i))
    index = int(order.stream_indices(self.seed, np.array([position]), len(self.split))[0])
    rng = order.example_rng(self.seed, position)
    image = _read(self.split, index, functools.partial(self._crop, rng=rng))
    return _with_text({"image": image, "label": self.split.labels[index],
                       "position": position}, self.text_ids, position, index)

  def _crop(self, payload, rng):
    """uint8 pixels (NaFlex: uint8 patches): _Finish scales the whole batch (4x less
    memory to stack)."""
    pp = self.pp
    if self.naflex_patch:
      return grain_naflex.train_patches(payload, rng, pp, self.naflex_patch)
    if pp.preset == "inception":
      return np_preprocess.inception_pixels(payload, pp.crop, rng, flip=pp.flip,
                                            randaug=pp.get("randaug"))
    return np_preprocess.bit_pixels(payload, pp.crop, rng, resize=pp.resize, flip=pp.flip,
                                    randaug=pp.get("randaug"))


class _Finish:
  """A batch of examples -> the step's rows: uint8 pixels to [-1, 1] in one call, MixUp
  (one lambda per global batch)."""

  def __init__(self, mixup_alpha: float, seed: int, batch_size: int, num_classes: int,
               multi_label: bool):
    self.mixup_alpha, self.seed, self.batch_size = mixup_alpha, seed, batch_size
    self.num_classes, self.multi_label = num_classes, multi_label

  def __call__(self, batch: dict) -> dict:
    position = batch.pop("position")
    if isinstance(batch["image"], dict):  # NaFlex (no MixUp: datasets.check_pp)
      batch["image"] = grain_naflex.scaled(batch["image"])
    else:
      batch["image"] = np_preprocess.to_model_range(batch["image"])
    batch["label"] = batch["label"].astype(np.int32, copy=False)
    if self.mixup_alpha:
      onehot = (batch["label"].astype(np.float32) if self.multi_label
                else np.eye(self.num_classes, dtype=np.float32)[batch["label"]])
      rng = order.mixup_rng(self.seed, int(position[0]) // self.batch_size)
      batch["image"], batch["label"] = np_preprocess.mixup(batch["image"], onehot,
                                                           self.mixup_alpha, rng)
    return batch


class _EvalExample:
  """Position in the padded split -> {'image', 'label', 'mask'} (and 'text': its first
  caption; padding rows repeat the last example, mask 0); `prepare` turns an image's
  payload into its 'image'."""

  def __init__(self, split: IndexedSplit, prepare, batch_size: int, rows: int,
               process_index: int, text_ids=None):
    self.split, self.prepare, self.text_ids = split, prepare, text_ids
    self.batch_size, self.rows, self.process_index = batch_size, rows, process_index

  def __call__(self, i: int) -> dict:
    batch_id, row = divmod(int(i), self.rows)
    position = batch_id * self.batch_size + self.process_index * self.rows + row
    index = min(position, len(self.split) - 1)
    image = _read(self.split, index, self.prepare)
    return _with_text({"image": image, "label": self.split.labels[index].astype(np.int32),
                       "mask": np.float32(position < len(self.split))},
                      self.text_ids, position, index)


class Dataset(datasets.Dataset):
  """A train and an eval split with the preprocessing of config.pp, read by Grain."""

  def __init__(self, train, eval_split, class_names: List[str], pp, workers: int = 0,
               patch_size: Optional[int] = None):
    super().__init__(train, eval_split, class_names, pp, patch_size)
    self.workers = workers

  def _iterate(self, dataset: grain.MapDataset, finish=None) -> Iterator[dict]:
    """The batches of `dataset`, made ahead by threads or by worker processes, then
    finish(batch) here: workers hand over uint8 train batches, 4x less to copy through
    shared memory than their [-1, 1] floats."""
    batches = dataset.to_iter_dataset(grain.ReadOptions(
        num_threads=1 if self.workers else 2, prefetch_buffer_size=_PREFETCH_BATCHES))
    if self.workers:
      if not flags.FLAGS.is_parsed():  # grain's workers read its absl flags (library use)
        flags.FLAGS.mark_as_parsed()
      grain_workers.quiet_resource_tracker()
      batches = batches.mp_prefetch(grain.MultiprocessingOptions(
          num_workers=self.workers, per_worker_buffer_size=_PREFETCH_BATCHES),
          worker_init_fn=grain_workers.start_in_worker)
    if finish is not None:
      batches = batches.map(finish)
    iterator = iter(batches)
    try:
      for batch in iterator:
        yield grain_workers.unlinked(batch) if self.workers else batch
    finally:
      close = getattr(iterator, "close", None)
      if close is not None:
        close()

  def train_batches(self, *, batch_size: int, start_step: int, num_steps: int, seed: int,
                    process_index: int, process_count: int) -> Iterator[dict]:
    """This process's rows of the global batches of steps start_step .. num_steps - 1, as
    tf_pipeline.Dataset.train_batches gives them."""
    rows = rows_per_process(batch_size, process_count)
    example = _TrainExample(self.train, self.pp, seed, batch_size, rows, start_step,
                            process_index, self.naflex_patch, self.text_ids(self.train, seed))
    finish = _Finish(self.pp.mixup_alpha, seed, batch_size, self.info.num_classes,
                     self.info.multi_label)
    steps = max(0, num_steps - start_step)
    dataset = grain.MapDataset.range(steps * rows).map(example)
    return self._iterate(dataset.batch(rows, drop_remainder=True), finish)

  def eval_batches(self, *, batch_size: int, process_index: int, process_count: int,
                   split: str = "eval") -> Iterator[dict]:
    """Fixed-shape batches covering a split once, as tf_pipeline.Dataset.eval_batches."""
    if split not in ("train", "eval"):
      raise errors.InvalidInput(f"unknown split {split!r}; use 'train' or 'eval'")
    source = self.train if split == "train" else self.eval
    rows = rows_per_process(batch_size, process_count)
    num_batches = -(-len(source) // batch_size)
    example = _EvalExample(source, self._eval_prepare(), batch_size, rows, process_index,
                           self.text_ids(source))
    dataset = grain.MapDataset.range(num_batches * rows).map(example)
    return self._iterate(dataset.batch(rows))

  def _eval_prepare(self):
    """payload -> the whole image resized to pp.crop, or NaFlex patches at its aspect
    ratio (a partial: worker processes unpickle it)."""
    if self.naflex_patch:
      return functools.partial(grain_naflex.eval_patches, patch=self.naflex_patch,
                               max_patches=self.pp.max_patches)
    return functools.partial(np_preprocess.eval_resize, size=self.pp.crop)


def open_dataset(config, patch_size: Optional[int] = None) -> Dataset:
  """The dataset of config.dataset for the Grain loader (see tf_pipeline.open_dataset): the
  sources Grain reads (digits, image folders, ArrayRecord shards, TFDS through
  tfds.data_source); the others refuse it in one line."""
  datasets.check_pp(config.pp)
  train, eval_split, class_names = registry.open_source(config, loader="grain")
  dataset = Dataset(train, eval_split, class_names, config.pp, config.get("grain_workers", 0),
                    patch_size)
  dataset.text_tokenizer = datasets.text_tokenizer(config)
  return dataset


def open_eval_dataset(config, dataset: str, split: str, label_feature: str = "label",
                      patch_size: Optional[int] = None) -> Dataset:
  """An evaluation-only Dataset (eval_batches only) of `dataset`'s `split`."""
  datasets.check_pp(config.pp)
  eval_split, class_names = registry.open_eval_source(dataset, split, config, label_feature,
                                                      loader="grain")
  evaluation = Dataset(None, eval_split, class_names, config.pp,
                       config.get("grain_workers", 0), patch_size)
  evaluation.text_tokenizer = datasets.text_tokenizer(config)
  return evaluation
