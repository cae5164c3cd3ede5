"""Image <-> text retrieval of an image-text run as it trains (the LiT and SigLIP papers'
COCO numbers): config.evals.<name> = {'type': 'retrieval', ...}, logged as
retrieval/<name>/image_to_text/recall@{1,5,10} and .../text_to_image/recall@{1,5,10}.

An image's query succeeds at k when any of its captions is among the k texts nearest it, a
caption's when its image is among the k images nearest it (scores.retrieval), computed as
python -m vit_jax.zeroshot --captions computes it on the run's saved file
(evaluators.image_text).

Settings (and their defaults): captions=None (a file of 'IMAGE<TAB>CAPTION' lines, images
relative to it, read as zeroshot reads it) or dataset=None with split='test' (a split whose
examples carry captions: every caption of each example is a query; images read with the
run's eval preprocessing), canonicalize=True (big_vision's lower-cased captions),
every_steps=None (config.eval_every; always at the end).
"""

from typing import Dict, List

import ml_collections
import numpy as np

from vit_jax.base import errors, storage
from vit_jax.base.console import log
from vit_jax.data import image_files, loaders
from vit_jax.training.evaluators import image_text, instances

TYPE = "retrieval"  # config.evals.<name>.type
DEFAULTS = {"type": TYPE, "captions": None, "dataset": None, "split": "test",
            "canonicalize": True, "every_steps": None}


def check(config: ml_collections.ConfigDict, predicts_classes: bool) -> None:
  """Settings no retrieval evaluation can run with, refused before anything is read (a
  captions file that is not there included)."""
  del predicts_classes  # a contrastive run's objective predicts none: checked by name
  for instance in image_text.declared(config, TYPE, DEFAULTS):
    where, settings = f"config.{instance.key}", instance.settings
    image_text.check_common(config, instance, tuple(DEFAULTS))
    if bool(settings.captions) == bool(settings.dataset):
      raise errors.InvalidInput(f"{where}: give captions (an 'IMAGE<TAB>CAPTION' file) or "
                                "dataset (a split with captions), one of them")
    if settings.captions and not storage.exists(settings.captions):
      raise errors.InvalidInput(f"{where}.captions={settings.captions}: no such file (a file "
                                "of 'IMAGE<TAB>CAPTION' lines)")


class Evaluator:
  """One instance: its captions read (a file) or its split opened when built; images and
  captions embedded with the state's parameters at each run."""
  reports = {}  # no per-class results

  def __init__(self, config: ml_collections.ConfigDict, instance: instances.Instance, module,
               mesh, dataset: loaders.Dataset):
    settings, where = instance.settings, f"config.{instance.key}"
    self.config, self.name, self.module, self.mesh = config, instance.name, module, mesh
    self.canonicalize = settings.canonicalize
    self.every = image_text.every_steps(config, settings)
    self.tokenizer = image_text.tokenizer_file(dataset)
    if settings.captions:
      self.paths, self.captions, self.owner = image_files.read_captions(settings.captions)
      self.split = self._embed = None
      return
    self.split = image_text.open_split(config, settings, where, dataset)
    captions = getattr(self.split.eval, "captions", None)  # streamed TFDS splits: none
    if captions is None:
      raise errors.InvalidInput(f"{where}: the {settings.split} split of {settings.dataset} "
                                "has no captions; give a captions file or a split with them")
    per_image = [captions.of(i) for i in range(len(self.split.eval))]
    self.captions = [caption for texts in per_image for caption in texts]
    self.owner = np.repeat(np.arange(len(per_image)), [len(t) for t in per_image])
    self.paths, self._embed = None, image_text.embedding_function(module, mesh)

  def due(self, step: int, total_steps: int) -> bool:
    return step % self.every == 0 or step == total_steps

  def run(self, state, step: int) -> Dict[str, float]:
    """{'retrieval/<name>/image_to_text/recall@k', '.../text_to_image/recall@k'} of the
    state's evaluated parameters."""
    params = state.eval_params
    model = image_text.read_pair(self.module, params, self.tokenizer)
    if self.paths is not None:
      zimg = image_text.embed_files(model, self.paths, self.config)
    else:
      zimg, _ = image_text.embed_split(self._embed, params, self.split,
                                       self.config.batch_eval, self.mesh)
    recall = image_text.caption_recall(model, zimg, self.captions, self.owner,
                                       self.canonicalize)
    log.info("step %d: retrieval %s on %d images, %d captions: %s", step, self.name, len(zimg),
             len(self.captions), " ".join(f"{k} {v:.4f}" for k, v in recall.items()))
    return {f"{TYPE}/{self.name}/{key}": value for key, value in recall.items()}


def build(config: ml_collections.ConfigDict, module, mesh, dataset: loaders.Dataset,
          objective) -> List[Evaluator]:
  """One Evaluator per declared instance (none when none is declared)."""
  del objective  # check refused the runs whose models embed no texts
  return [Evaluator(config, instance, module, mesh, dataset)
          for instance in image_text.declared(config, TYPE, DEFAULTS)]
