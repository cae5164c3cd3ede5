"""The part of clu's MetricWriter interface that our run writers leave out.

The train loop writes scalars, texts and hyperparameters; images, videos, audio,
histograms and tensor summaries are TensorBoard's business and never reach metrics.jsonl
or the object-store event files. One base class says so once for both writers.
"""

from clu.metric_writers import interface


class ScalarWriter(interface.MetricWriter):
  """A MetricWriter that keeps scalars, texts and hparams (subclasses decide how) and
  drops the media kinds the train loop never writes."""

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
