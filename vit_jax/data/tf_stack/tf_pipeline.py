"""The tf.data input pipeline (config.loader='tf'; the Grain loader, without TensorFlow, is
grain_pipeline.py): datasets (embedded digits, image directories, captions files, TFDS)
-> this process's batches.

Indexed sources (the digits, image directories, TFDS datasets up to 2 GiB, held in
memory as encoded bytes) give batches that do not depend on the number of processes
or devices, so a run resumes exactly at any step on any topology (the order and seeds:
order.py); starting at step k builds the pipeline from step k's positions: nothing is
replayed. Large TFDS datasets (over 2 GiB, e.g. imagenet2012) are streamed instead: each
process reads its own part of the split's files (tfds.even_splits) through a seeded
shuffle buffer and decodes after shuffling. Their order depends on the number of
processes, and a resumed run reshuffles rather than replaying.
Evaluation pads the last global batch and returns a mask: every example counts once.
An image that fails to decode (or a file gone since the dataset was opened) stops the
iterator with one line naming it (splits.CorruptImageError / FileNotFoundError;
indexed_reader.py). Global device batches: device_batches.py.
"""

from typing import Iterator, List, Optional

import jax
import numpy as np
import tensorflow as tf

from vit_jax.base import errors
from vit_jax.data import datasets, order
from vit_jax.data.datasets import (DatasetInfo, check, check_pp, class_counts,  # noqa: F401
                                  rows_per_process)
from vit_jax.data.sources import registry
from vit_jax.data.sources.tfds_builder import read_tfds
from vit_jax.data.splits import IndexedSplit, StreamingSplit
from vit_jax.data.tf_stack import indexed_reader, tf_naflex, tf_preprocess


class Dataset(datasets.Dataset):
  """A train and an eval split with the preprocessing of config.pp, read by tf.data (train
  is None for an evaluation-only set)."""

  def __init__(self, train, eval_split, class_names: List[str], pp, shuffle_buffer: int,
               patch_size: Optional[int] = None):
    super().__init__(train, eval_split, class_names, pp, patch_size)
    self.shuffle_buffer = shuffle_buffer

  def _payload(self, split, data: tf.Tensor) -> tf.Tensor:
    """Pixels or encoded bytes of one example (files are read here, in parallel)."""
    return tf.io.read_file(data) if split.kind == "files" else data

  def _augment(self, image: tf.Tensor, seed: tf.Tensor):
    pp = self.pp
    randaug = pp.get("randaug")
    if self.naflex_patch:
      return tf_naflex.train_patches(image, seed, pp, self.naflex_patch)
    if pp.preset == "inception":
      return tf_preprocess.inception_crop(image, pp.crop, seed, flip=pp.flip, randaug=randaug)
    return tf_preprocess.bit_crop(image, pp.crop, seed, resize=pp.resize, flip=pp.flip,
                               randaug=randaug)

  # --- train ---

  def train_batches(self, *, batch_size: int, start_step: int, num_steps: int, seed: int,
                    process_index: int, process_count: int) -> Iterator[dict]:
    """This process's rows of the global batches of steps start_step .. num_steps - 1:
    {'image': float32 [B/P, crop, crop, 3], 'label': int32 [B/P]} (multi-label data:
    multi-hot [B/P, num_classes]; with MixUp, 'label' is float32 [B/P, num_classes]);
    NaFlex (pp.max_patches): 'image' is {'patches', 'mask', 'grid'} (tf_naflex.cut).
    A split with captions adds 'text': int32 [B/P, L], the token ids of the caption each
    row's stream position draws (order.caption_choice)."""
    rows = rows_per_process(batch_size, process_count)  # MixUp's even rows: see check()
    text_ids = self.text_ids(self.train, seed)

    def augment(position, data, label, text=None):
      image = self._augment(self._payload(self.train, data), order.example_seed(seed, position))
      return with_text({"image": image, "label": label, "position": position}, text)

    def augment_batch(positions, pixels, labels, texts=None):
      """The batched path: the uniforms of a row depend on (seed, its stream position)
      only, so the rows a process reads are augmented as in any other topology."""
      step = positions[0] // batch_size
      uniforms = tf.random.stateless_uniform([batch_size, 3],
                                             order.batch_uniforms_seed(seed, step))
      uniforms = tf.gather(uniforms, positions - step * batch_size)
      images = tf_preprocess.bit_crop_batch(pixels, self.pp.crop, uniforms,
                                         resize=self.pp.resize, flip=self.pp.flip)
      return with_text({"image": images, "label": labels, "position": positions}, texts)

    def finish(batch):
      position = batch.pop("position")
      if self.pp.mixup_alpha:
        onehot = (tf.cast(batch["label"], tf.float32) if self.info.multi_label
                  else tf.one_hot(batch["label"], self.info.num_classes))
        batch["image"], batch["label"] = tf_preprocess.mixup(
            batch["image"], onehot, self.pp.mixup_alpha,
            order.mixup_seed(seed, position[0] // batch_size))
      return batch

    parallel = dict(num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    if isinstance(self.train, StreamingSplit):
      examples = self._streaming_train(start_step, seed, process_index, process_count)
      examples = examples.enumerate().map(lambda i, example: (  # as in order.row_positions
          (start_step + i // rows) * batch_size + process_index * rows + i % rows, *example))
      batches = examples.map(augment, **parallel).batch(rows, drop_remainder=True)
    else:
      def rows_of_step(step):
        positions = order.row_positions(step, batch_size, process_index, process_count)
        return positions, order.stream_indices(seed, positions, len(self.train))
      steps = tf.data.Dataset.range(start_step, num_steps)
      if self._batched_augmentation():
        batches = indexed_reader.read_batches(self.train, rows_of_step, steps, text_ids)
        batches = batches.map(augment_batch, **parallel)
      else:
        examples = indexed_reader.read_rows(self.train, rows_of_step, steps, text_ids)
        batches = examples.map(augment, **parallel).batch(rows, drop_remainder=True)
    batches = batches.map(finish)
    batches = batches.take(max(0, num_steps - start_step)).prefetch(2)
    batches = batches.with_options(host_threading()).as_numpy_iterator()
    if isinstance(self.train, StreamingSplit):
      return batches
    return indexed_reader.naming_bad_images(batches, self.train, rows_of_step, start_step, augment)

  def _batched_augmentation(self) -> bool:
    """Same-sized pixel images (the digits) with the BiT crop are augmented a batch at a
    time; encoded images decode one by one (sizes differ, JPEGs decode their window), and
    so does RandAugment (per image, in numpy)."""
    return (isinstance(self.train, IndexedSplit) and self.train.kind == "pixels"
            and self.pp.preset == "bit" and not self.pp.get("randaug")
            and not self.naflex_patch)

  def _streaming_train(self, start_step: int, seed: int, process_index: int,
                       process_count: int) -> tf.data.Dataset:
    """(data, label) of this process's part of the split, repeated and shuffled."""
    import tensorflow_datasets as tfds
    split = self.train
    part = tfds.even_splits(split.split, n=process_count)[process_index]
    shuffle_seed = order.shuffle_seed(seed, start_step, process_index)
    data = read_tfds(split.builder, part, shuffle_files=True,
                     read_config=tfds.ReadConfig(shuffle_seed=shuffle_seed))
    data = data.repeat().shuffle(self.shuffle_buffer, seed=shuffle_seed)
    return data.map(split.features)

  # --- eval ---

  def _eval_image(self, image: tf.Tensor):
    """The whole image: resized to pp.crop, or NaFlex patches at its aspect ratio."""
    if self.naflex_patch:
      return tf_naflex.eval_patches(image, self.naflex_patch, self.pp.max_patches)
    return tf_preprocess.eval_resize(image, self.pp.crop)

  def eval_batches(self, *, batch_size: int, process_index: int, process_count: int,
                   split: str = "eval") -> Iterator[dict]:
    """Fixed-shape batches covering a split once, the same number in every process:
    {'image', 'label' int32, 'mask' float32 (0 on padding rows)}, and 'text' (the token ids
    of each example's first caption) for a split with captions. split='train' gives the
    train split unaugmented (frozen features for few-shot probes)."""
    if split not in ("train", "eval"):
      raise errors.InvalidInput(f"unknown split {split!r}; use 'train' or 'eval'")
    source = self.train if split == "train" else self.eval
    rows = rows_per_process(batch_size, process_count)
    if isinstance(source, StreamingSplit):
      examples, num_batches = self._streaming_eval(source, rows, process_index, process_count)
    else:
      size = len(source)
      num_batches = -(-size // batch_size)

      def rows_of_batch(batch_id):
        positions = order.row_positions(batch_id, batch_size, process_index, process_count)
        return positions, np.minimum(positions, size - 1)  # padding rows repeat the last

      def prepare(position, data, label, text=None):
        image = self._eval_image(self._payload(source, data))
        return with_text({"image": image, "label": label,
                          "mask": tf.cast(position < size, tf.float32)}, text)

      batch_ids = tf.data.Dataset.range(num_batches)
      examples = indexed_reader.read_rows(source, rows_of_batch, batch_ids,
                                          self.text_ids(source))
      examples = examples.map(prepare, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    batches = examples.batch(rows).take(num_batches).prefetch(2)
    batches = batches.with_options(host_threading()).as_numpy_iterator()
    if isinstance(source, StreamingSplit):
      return batches
    return indexed_reader.naming_bad_images(batches, source, rows_of_batch, 0, prepare)

  def _streaming_eval(self, split: StreamingSplit, rows: int, process_index: int,
                      process_count: int):
    """This process's part of the split, padded to the longest part's batch count."""
    import tensorflow_datasets as tfds
    parts = tfds.even_splits(split.split, n=process_count)
    longest = max(split.builder.info.splits[part].num_examples for part in parts)
    data = read_tfds(split.builder, parts[process_index], shuffle_files=False)

    def prepare(example):
      image, label = split.features(example)
      return {"image": self._eval_image(image), "label": label,
              "mask": tf.constant(1.0)}

    examples = data.map(prepare, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    label_spec = examples.element_spec["label"]
    padding = tf.data.Dataset.from_tensors({
        "image": tf.nest.map_structure(lambda spec: tf.zeros(spec.shape, spec.dtype),
                                       examples.element_spec["image"]),
        "label": tf.zeros(label_spec.shape, label_spec.dtype), "mask": tf.constant(0.0)}).repeat()
    return examples.concatenate(padding), -(-longest // rows)


def with_text(example: dict, text) -> dict:
  """An example or batch with its captions' token ids, where its split has captions."""
  return example if text is None else {**example, "text": text}


def open_dataset(config, patch_size: Optional[int] = None) -> Dataset:
  """The dataset of config.dataset: 'digits', an image directory or a TFDS name.

  Validates everything up front and fast (one-line errors naming the problem and the
  fix). Reads dataset, train_split, eval_split, tfds_data_dir, tfds_manual_dir,
  tfds_download, shuffle_buffer and pp.{preset, crop, resize, flip, mixup_alpha, randaug};
  the splits apply to TFDS only (default 'train' / 'test'). With pp.max_patches (NaFlex),
  patch_size is the model's patch side. An image-text run also reads objective,
  captions.{templates, class_names} (captions.attach) and text.{tokenizer, length, lower}
  (datasets.text_tokenizer).
  """
  check_pp(config.pp)
  train, eval_split, class_names = registry.open_source(config, loader="tf")
  dataset = Dataset(train, eval_split, class_names, config.pp, config.shuffle_buffer,
                    patch_size)
  dataset.text_tokenizer = datasets.text_tokenizer(config)
  return dataset


def open_eval_dataset(config, dataset: str, split: str, label_feature: str = "label",
                      patch_size: Optional[int] = None) -> Dataset:
  """An evaluation-only Dataset (eval_batches only) of `dataset`'s `split`, with the
  eval preprocessing of config.pp; see registry.open_eval_source."""
  check_pp(config.pp)
  eval_split, class_names = registry.open_eval_source(dataset, split, config, label_feature,
                                                      loader="tf")
  evaluation = Dataset(None, eval_split, class_names, config.pp, config.shuffle_buffer,
                       patch_size)
  evaluation.text_tokenizer = datasets.text_tokenizer(config)
  return evaluation


def host_threading() -> tf.data.Options:
  """tf.data's threads: with accelerators the host's cores are the input pipeline's; on
  the CPU backend XLA's step already runs on every core, and more runnable threads only
  preempt it, so the pipeline gets one thread (measured: the digits' batched pipeline
  makes ~100k img/s on it, 50x what the demo's step takes)."""
  options = tf.data.Options()
  if jax.default_backend() == "cpu":
    options.threading.private_threadpool_size = 1
    options.threading.max_intra_op_parallelism = 1
  return options
