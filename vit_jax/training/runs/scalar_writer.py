"""The part of clu's MetricWriter interface that our run writers keep, without clu's
metric_writers package (it imports TensorFlow): the Grain loader's runs never load it.

The train loop writes scalars, texts and hyperparameters, and one image (the confusion
matrix, which Fanout passes to clu's TensorBoard writer where a run has one); media never
reach metrics.jsonl or our own event files. One base class says so once for every writer.
"""

import abc


class ScalarWriter(abc.ABC):
  """A MetricWriter (clu's interface, duck-typed) that keeps scalars, texts and hparams
  (each subclass says how) and drops the media kinds."""

  @abc.abstractmethod
  def write_scalars(self, step, scalars):
    """Keeps {name: number} at `step`."""

  @abc.abstractmethod
  def write_texts(self, step, texts):
    """Keeps {name: text} at `step`."""

  @abc.abstractmethod
  def write_hparams(self, hparams):
    """Keeps the run's hyperparameters."""

  def flush(self):
    """Nothing is buffered."""

  def close(self):
    """Nothing is held open."""

  def write_summaries(self, step, values, metadata=None):
    """Tensor summaries are not kept."""

  def write_images(self, step, images):
    """Images are not kept."""

  def write_videos(self, step, videos):
    """Videos are not kept."""

  def write_audios(self, step, audios, *, sample_rate):
    """Audio is not kept."""

  def write_histograms(self, step, arrays, num_buckets=None):
    """Histograms are not kept."""

  def write_pointcloud(self, step, point_clouds, *, point_colors=None, configs=None):
    """Point clouds are not kept."""


class Fanout(ScalarWriter):
  """Every write goes to each of `writers` (clu's MultiWriter, without clu)."""

  def __init__(self, writers):
    self._writers = list(writers)

  def write_scalars(self, step, scalars):
    for writer in self._writers:
      writer.write_scalars(step, scalars)

  def write_texts(self, step, texts):
    for writer in self._writers:
      writer.write_texts(step, texts)

  def write_hparams(self, hparams):
    for writer in self._writers:
      writer.write_hparams(hparams)

  def write_images(self, step, images):
    """The confusion matrix (runs.class_report): to the writers that keep images (clu's
    TensorBoard writer); the others drop it."""
    for writer in self._writers:
      writer.write_images(step, images)

  def flush(self):
    for writer in self._writers:
      writer.flush()

  def close(self):
    for writer in self._writers:
      writer.close()
