"""What the image-text evaluators (zero_shot, retrieval) share, and what they and python -m
vit_jax.zeroshot compute alike, so that a run's numbers are zeroshot's on its saved file:
the pair in training read as zeroshot reads that file (the model family's zero-shot part:
its text length, tokenizer and reading), class scores of prompt templates, caption recall,
image files embedded at the same batch size; the checks of their shared settings; images of
a dataset split embedded on the run's mesh."""

import itertools
import os
from typing import Dict, Optional, Sequence, Tuple

import jax
import ml_collections
import numpy as np

from vit_jax.base import errors
from vit_jax.data import loaders, prompt_templates
from vit_jax.models import family_registry
from vit_jax.training import sharding
from vit_jax.training.evaluators import fewshot_probes, instances
from vit_jax.training.objectives import naflex
from vit_jax.training.scores import retrieval

# Images per forward pass of image files: zeroshot's --batch_size default, so that both
# compile the same shapes.
IMAGE_BATCH = 32
OBJECTIVE = "contrastive"  # the objective whose models embed images and texts


def class_scores(model, zimg: np.ndarray, names: Sequence[str], templates: Sequence[str],
                 canonicalize: bool) -> np.ndarray:
  """[images, classes] as the model is read; each class's templates filled with its name
  (both in big_vision's canonical form unless canonicalize is off), embedded, averaged and
  normalised (model: the family's opened zero-shot model)."""
  zcls = model.class_embeddings(*prompt_templates.prompt_texts(names, templates, canonicalize))
  return model.scores(zimg, zcls)


def caption_recall(model, zimg: np.ndarray, captions: Sequence[str], owner: Sequence[int],
                   canonicalize: bool) -> Dict[str, float]:
  """Recall@1/5/10 both ways (scores.retrieval.recall_at_k) of images and their captions;
  owner[j]: the image caption j describes."""
  if canonicalize:
    captions = [prompt_templates.canonicalize_text(c) for c in captions]
  return retrieval.recall_at_k(zimg, model.embed_texts(captions), owner)


def embed_files(model, paths: Sequence[str], config: ml_collections.ConfigDict) -> np.ndarray:
  """Normalised embeddings of image files read as zeroshot reads them: squashed to the
  crop the run trains at (the side of its saved position table), or NaFlex's reading."""
  return model.embed_images(paths, image_size=config.pp.crop,
                            max_patches=config.pp.get("max_patches"), batch_size=IMAGE_BATCH)


# --- Settings ---------------------------------------------------------------------------------


def declared(config: ml_collections.ConfigDict, kind: str,
             defaults: Dict[str, object]) -> Tuple[instances.Instance, ...]:
  """config.evals' instances of a kind, with the keys they leave out at their defaults."""
  return tuple(instances.Instance(i.name, i.key, ml_collections.ConfigDict(
      {**defaults, **dict(i.settings.items())})) for i in instances.of_type(config, kind))


def check_common(config: ml_collections.ConfigDict, instance: instances.Instance,
                 keys: Sequence[str]) -> None:
  """Unknown keys, a run whose model embeds no texts, every_steps."""
  where, settings = f"config.{instance.key}", instance.settings
  unknown = sorted(set(settings.keys()) - set(keys))
  if unknown:
    raise errors.InvalidInput(f"{where} has unknown key(s) {', '.join(unknown)}; its keys "
                              f"are {', '.join(keys)}")
  objective = config.get("objective")
  if objective != OBJECTIVE:
    raise errors.InvalidInput(
        f"{where}: a {settings.type} evaluator scores images against texts, which "
        f"config.objective={objective!r} does not embed: drop it, or train with "
        f"config.objective={OBJECTIVE!r}")
  every = settings.every_steps
  if every is not None and (not isinstance(every, int) or isinstance(every, bool) or every < 1):
    raise errors.InvalidInput(f"{where}.every_steps={every!r} must be None (config.eval_every)"
                              " or a number of steps >= 1")
  if not isinstance(settings.canonicalize, bool):
    raise errors.InvalidInput(f"{where}.canonicalize={settings.canonicalize!r} must be True "
                              "(big_vision's lower-cased prompts) or False")


def every_steps(config: ml_collections.ConfigDict, settings: ml_collections.ConfigDict) -> int:
  return settings.every_steps or config.eval_every


def class_folders(name: str, split: str, where: str) -> Optional[str]:
  """The folder of class folders a dataset name means: DIR/<split> of an image-folder
  dataset (DIR/train/CLASS, DIR/<split>/CLASS), or DIR itself (zeroshot --folder's
  ROOT/CLASS/IMAGE); None for datasets the loaders open (digits, TFDS, ArrayRecord shards)."""
  root = os.path.expanduser(name)
  if not os.path.isdir(root):
    return None
  if os.path.isdir(os.path.join(root, split)):
    return os.path.join(root, split)
  if os.path.isdir(os.path.join(root, "train")):
    raise errors.InvalidInput(f"{where}: {name} has no {split}/ folder: set {where}.split to "
                              "the folder holding the images to score")
  if any(os.path.isdir(os.path.join(root, entry)) for entry in os.listdir(root)):
    return root
  return None


# --- The pair and its images ------------------------------------------------------------------


def tokenizer_file(dataset: loaders.Dataset) -> str:
  """The vocabulary file the run's text tower reads (the training dataset's tokenizer)."""
  spec = dataset.text_tokenizer
  if spec is None:
    raise errors.InvalidInput("the run has no text tokenizer: set config.text.tokenizer to "
                              "the text tower's vocabulary file")
  return spec.path


def read_pair(module, params, tokenizer: str):
  """The pair of a train state as its family's zero-shot part reads its saved file; a
  multi-process run's params are gathered onto this process's first device (a collective:
  every process evaluates)."""
  part = family_registry.for_module(module).zero_shot
  if part is None:
    raise errors.InvalidInput(f"a {type(module).__name__} scores no texts: the image-text "
                              f"evaluators take {family_registry.titles_with('zero_shot')} "
                              "models")
  if jax.process_count() > 1:
    params = jax.device_put(sharding.to_host(params), jax.local_devices()[0])
  return part.for_params(module, params, tokenizer=tokenizer)


def open_split(config: ml_collections.ConfigDict, settings: ml_collections.ConfigDict,
               where: str, dataset: loaders.Dataset) -> loaders.Dataset:
  """settings.dataset's settings.split for evaluation, its captions (if any) tokenized as
  the run's (dataset: the training dataset)."""
  try:
    opened = loaders.open_eval_dataset(config, settings.dataset, settings.split,
                                       patch_size=naflex.loader_patch_size(config))
  except (FileNotFoundError, ValueError) as e:
    raise type(e)(f"{where}: {e}") from None
  opened.text_tokenizer = dataset.text_tokenizer
  return opened


def embedding_function(module, mesh: jax.sharding.Mesh):
  """Jitted (params, batch) -> (normalised image embeddings, labels, mask), batch-sharded."""
  def embed(params, batch):
    zimg = module.apply({"params": params}, batch["image"], method="embed_images")
    return zimg, batch["label"], batch["mask"]

  return jax.jit(sharding.on_mesh(mesh, embed), out_shardings=sharding.batch_sharding(mesh))


def embed_split(embed, params, dataset: loaders.Dataset, batch_size: int, mesh,
                max_examples: Optional[int] = None) -> Tuple[np.ndarray, np.ndarray]:
  """(image embeddings [N, D], labels [N]) of a dataset's eval split in its order, read with
  its eval preprocessing; max_examples: only its first ones."""
  batches = dataset.eval_batches(batch_size=batch_size, process_index=jax.process_index(),
                                 process_count=jax.process_count())
  if max_examples:
    batches = itertools.islice(batches, -(-max_examples // batch_size))
  zimg, labels = fewshot_probes.compute_features(embed, params, batches,
                                                 sharding.batch_sharding(mesh))
  return zimg[:max_examples], labels[:max_examples]
