"""Zero-shot classification accuracy of an image-text run as it trains (CLIP, LiT and SigLIP
report it on ImageNet): config.evals.<name> = {'type': 'zeroshot', 'dataset': ...}, logged
as zeroshot/<name>/top1.

Each class's prompts (its name in every template) are embedded, averaged and normalised,
and an image's prediction is the class it scores highest, exactly as python -m
vit_jax.zeroshot reads the run's saved file (evaluators.image_text), so the last number a
run logs on a folder is what `zeroshot --checkpoint=WORKDIR/params.npz --folder=DIR`
prints. The dataset is a folder of class folders (ROOT/CLASS/IMAGE, or an image-folder
dataset's ROOT/<split>/CLASS/IMAGE), its files read as zeroshot reads them; or 'digits',
a TFDS name or ArrayRecord shards, read with the run's eval preprocessing.

Settings (and their defaults): dataset, split='test', class_names=None (the dataset's, or
one name per class in its order), templates='clip_paper' (a named set of
data/prompt_templates.py, 'a photo of a {}.|{}', or a list), canonicalize=True (big_vision's
lower-cased prompts), every_steps=None (config.eval_every; always at the end),
max_examples=None (all; else the split's first ones, a folder's evenly spread over it).
"""

from typing import Dict, List, Optional, Sequence

import ml_collections
import numpy as np

from vit_jax.base import errors
from vit_jax.base.console import log
from vit_jax.data import image_files, loaders, prompt_templates
from vit_jax.training.evaluators import image_text, instances
from vit_jax.training.scores import retrieval

TYPE = "zeroshot"  # config.evals.<name>.type
DEFAULTS = {"type": TYPE, "dataset": None, "split": "test", "class_names": None,
            "templates": "clip_paper", "canonicalize": True, "every_steps": None,
            "max_examples": None}


def templates_of(value, where: str) -> List[str]:
  """The prompts a templates setting names: a set of prompt_templates.SETS, 'a|b' or a list,
  each with exactly one '{}'."""
  if isinstance(value, str) and value in prompt_templates.SETS:
    return list(prompt_templates.SETS[value])
  if isinstance(value, str):
    templates = value.split("|")  # as zeroshot --templates reads it
  elif isinstance(value, (list, tuple)) and all(isinstance(t, str) for t in value):
    templates = list(value)
  else:
    templates = []
  templates = [t.strip() for t in templates if t.strip()]
  if not templates or any(t.count("{}") != 1 for t in templates):
    raise errors.InvalidInput(
        f"{where}.templates={value!r}: give prompts with exactly one {{}} for the class name "
        f"('a photo of a {{}}.|{{}}', or a list), or a named set: "
        f"{', '.join(prompt_templates.SETS)}")
  return templates


def check(config: ml_collections.ConfigDict, predicts_classes: bool) -> None:
  """Settings no zero-shot evaluation can run with, refused before anything is read."""
  del predicts_classes  # a contrastive run's objective predicts none: checked by name
  for instance in image_text.declared(config, TYPE, DEFAULTS):
    where, settings = f"config.{instance.key}", instance.settings
    image_text.check_common(config, instance, tuple(DEFAULTS))
    if not settings.dataset or not isinstance(settings.dataset, str):
      raise errors.InvalidInput(f"{where}.dataset is missing: a folder of class folders, "
                                "'digits' or a TFDS name")
    templates_of(settings.templates, where)
    names = settings.class_names
    if names is not None and (isinstance(names, str) or not names or not all(
        isinstance(n, str) and n.strip() for n in names)):
      raise errors.InvalidInput(f"{where}.class_names={names!r} must be None (the dataset's) "
                                "or a list of names, one per class in the dataset's order")
    most = settings.max_examples
    if most is not None and (not isinstance(most, int) or isinstance(most, bool) or most < 1):
      raise errors.InvalidInput(f"{where}.max_examples={most!r} must be None (all) or >= 1")


def _spread(count: int, most: Optional[int]) -> np.ndarray:
  """Indices of at most `most` of `count` items, evenly spread (all when most is None)."""
  if most is None or most >= count:
    return np.arange(count)
  return np.unique(np.linspace(0, count - 1, most).round().astype(np.int64))


class Evaluator:
  """One instance: its images found (a folder) or its split opened when built; the class
  embeddings made from the state's parameters at each run."""
  reports = {}  # no per-class results

  def __init__(self, config: ml_collections.ConfigDict, instance: instances.Instance, module,
               mesh, dataset: loaders.Dataset):
    settings, where = instance.settings, f"config.{instance.key}"
    self.config, self.name, self.module, self.mesh = config, instance.name, module, mesh
    self.templates = templates_of(settings.templates, where)
    self.canonicalize, self.every = settings.canonicalize, image_text.every_steps(config,
                                                                                settings)
    self.tokenizer = image_text.tokenizer_file(dataset)
    self.max_examples = settings.max_examples
    folder = image_text.class_folders(settings.dataset, settings.split, where)
    if folder is not None:
      paths, labels, names = image_files.folder_images(folder)
      chosen = _spread(len(paths), self.max_examples)
      self.paths, self.labels = [paths[i] for i in chosen], np.asarray(labels)[chosen]
      self.split, self._embed = None, None
    else:
      self.split = image_text.open_split(config, settings, where, dataset)
      if self.split.info.multi_label:
        raise errors.InvalidInput(f"{where}: {settings.dataset} is multi-label; zero-shot "
                                  "top-1 takes one class per image")
      names, self.paths = self.split.info.class_names, None
      self._embed = image_text.embedding_function(module, mesh)
    self.class_names = self._names(settings.class_names, names, where)
    prompt_templates.check_class_names(
        self.class_names, self.canonicalize, switch=f"--{where}.canonicalize=False",
        what=f"{where}.class_names" if settings.class_names else f"{settings.dataset}'s classes")

  @staticmethod
  def _names(given: Optional[Sequence[str]], found: Sequence[str], where: str) -> List[str]:
    if given is None:
      return list(found)
    if len(given) != len(found):
      raise errors.InvalidInput(
          f"{where}.class_names has {len(given)} names for the dataset's {len(found)} "
          f"classes ({', '.join(found[:5])}{'...' if len(found) > 5 else ''}): give one per "
          "class, in that order")
    return list(given)

  def due(self, step: int, total_steps: int) -> bool:
    return step % self.every == 0 or step == total_steps

  def run(self, state, step: int) -> Dict[str, float]:
    """{'zeroshot/<name>/top1': the share of images whose highest-scoring class is theirs}
    of the state's evaluated parameters."""
    params = state.eval_params
    model = image_text.read_pair(self.module, params, self.tokenizer)
    if self.paths is not None:
      zimg, labels = image_text.embed_files(model, self.paths, self.config), self.labels
    else:
      zimg, labels = image_text.embed_split(self._embed, params, self.split,
                                            self.config.batch_eval, self.mesh,
                                            self.max_examples)
    scores = image_text.class_scores(model, zimg, self.class_names, self.templates,
                                     self.canonicalize)
    top1 = retrieval.top1(scores, labels)
    log.info("step %d: zero-shot %s top-1 %.4f on %d images, %d classes", step, self.name,
             top1, len(labels), len(self.class_names))
    return {f"{TYPE}/{self.name}/top1": top1}


def build(config: ml_collections.ConfigDict, module, mesh, dataset: loaders.Dataset,
          objective) -> List[Evaluator]:
  """One Evaluator per declared instance (none when none is declared)."""
  del objective  # check refused the runs whose models embed no texts
  return [Evaluator(config, instance, module, mesh, dataset)
          for instance in image_text.declared(config, TYPE, DEFAULTS)]
