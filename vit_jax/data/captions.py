"""Captions in the input pipelines: labelled data turned into captions (config.captions:
every template filled with every variant of each class name), what an image-text dataset
must have, and the token ids of a batch's captions, which both stacks compute with one
numpy function (TextIds) so that they feed the same ids."""

import dataclasses
from typing import List, Optional, Sequence, Tuple

import numpy as np

from vit_jax.base import errors
from vit_jax.data import order, prompt_templates
from vit_jax.data.splits import ClassCaptions, IndexedSplit


def contrastive(config) -> bool:
  return config.get("objective") == "contrastive"


def templates_of(config) -> Optional[List[str]]:
  """config.captions.templates: None, a named set (prompt_templates.SETS) or templates
  with one {} each."""
  templates = config.get("captions", {}).get("templates")
  if templates is None:
    return None
  if isinstance(templates, str) and templates in prompt_templates.SETS:
    return list(prompt_templates.SETS[templates])
  if (isinstance(templates, str) or not templates
      or not all(isinstance(t, str) and t.count("{}") == 1 for t in templates)):
    raise errors.InvalidInput(
        f"config.captions.templates={templates!r} must be templates with one {{}} for the "
        f"class name each, e.g. ('a photo of a {{}}.', 'a {{}}'), or one of "
        f"{', '.join(prompt_templates.SETS)}")
  return list(templates)


def class_variants(config, class_names: Sequence[str]) -> List[Tuple[str, ...]]:
  """Each class's names (config.captions.class_names: None = the dataset's names; else one
  list of variants per class, a single string being one variant)."""
  given = config.get("captions", {}).get("class_names")
  if given is None:
    return [(name,) for name in class_names]
  variants = [(v,) if isinstance(v, str) else tuple(v) for v in given]
  if len(variants) != len(class_names) or not all(
      names and all(isinstance(name, str) and name for name in names) for names in variants):
    raise errors.InvalidInput(
        f"config.captions.class_names has {len(variants)} entries for "
        f"{len(class_names)} classes ({', '.join(class_names[:3])}...): give one list of "
        "non-empty names per class, in class order, or None for the dataset's names")
  return variants


def class_captions(templates: Sequence[str],
                   variants: Sequence[Sequence[str]]) -> Tuple[Tuple[str, ...], ...]:
  """Each class's captions: every template filled with every variant of its name, in
  template order (the first is the class's eval caption)."""
  return tuple(tuple(template.replace("{}", name) for template in templates for name in names)
               for names in variants)


def _with_class_captions(split, per_class, name: str):
  if not isinstance(split, IndexedSplit):
    raise errors.InvalidInput(
        f"{name} is streamed (over 2 GiB): captions from its class names need examples "
        "read by index; set config.loader='grain' (TFDS prepared as array_record)")
  if split.multi_label:
    raise errors.InvalidInput(f"{name} has several labels per image: captions from "
                              "class names take one class per image")
  return dataclasses.replace(split, captions=ClassCaptions(split.labels, per_class))


def attach(config, opened):
  """(train, eval, class names) of config.dataset as the run trains on them: with a
  contrastive objective, labelled splits get captions from config.captions.templates, and
  the train split must have captions; a dataset of captions alone (no class names) trains
  a contrastive objective only."""
  train, evaluation, class_names = opened
  has_captions = getattr(train, "captions", None) is not None
  if not contrastive(config):
    if has_captions and not class_names:
      raise errors.InvalidInput(f"{config.dataset} holds captions, not classes: it trains an "
                                "image-text pair (config.objective='contrastive')")
    return opened
  templates = templates_of(config)
  if templates is not None and class_names:
    per_class = class_captions(templates, class_variants(config, class_names))
    train, evaluation = (
        split if getattr(split, "captions", None) is not None
        else _with_class_captions(split, per_class, config.dataset)
        for split in (train, evaluation))
  elif not has_captions:
    raise errors.InvalidInput(
        f"{config.dataset} has labels, not captions: set config.captions.templates (e.g. "
        "('a photo of a {}.',)) to train on captions made from its class names, or train "
        "on a captions file (IMAGE<TAB>CAPTION lines)")
  return train, evaluation, class_names


class TextIds:
  """Token ids int32 [n, length] of the captions of examples at stream positions: with a
  seed (training) the caption order.caption_choice draws, without one (evaluation) each
  example's first. tf.data calls it per batch (in numpy), Grain per example: the same ids.
  A plain class: Grain's worker processes unpickle it."""

  def __init__(self, captions, tokenizer, seed: Optional[int] = None):
    self.captions, self.tokenizer, self.seed = captions, tokenizer, seed

  @property
  def length(self) -> int:
    return self.tokenizer.max_len

  def __call__(self, positions, indices) -> np.ndarray:
    texts = []
    for position, index in zip(positions, indices):
      options = self.captions.of(int(index))
      pick = (0 if self.seed is None
              else order.caption_choice(self.seed, int(position), len(options)))
      texts.append(options[pick])
    return self.tokenizer.load()(texts)
