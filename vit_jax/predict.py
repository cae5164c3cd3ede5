"""Classifies images: python -m vit_jax.predict --checkpoint=CHECKPOINT IMAGE [IMAGE ...].

CHECKPOINT is a path, a gs:// URL, FAMILY/NAME, a released name or hf-hub:ORG/NAME (released
and Hub names are fetched into checkpoints/ first: see checkpoints/README.md);
images are local paths or URLs (gs://, https://). Each image is preprocessed exactly like
evaluation (bilinear resize to the checkpoint's own resolution, scaled to [-1, 1]); batches
have a fixed shape, so the one jitted function compiles once however many images there are.
Prints the top-k classes per image with softmax probabilities (sigmoid scores for a
checkpoint a multi-label run saved), or writes them as JSON for scripts (--json).

With --classes=cat,dog (or @FILE), CHECKPOINT is an image-text model (a released name, .npz
or Hugging Face folder of a family with a zero-shot part; its guide in docs/) and the
classes are scored zero-shot, as python -m vit_jax.zeroshot does (each model read as it is
meant to be: a softmax over the classes, or a sigmoid per class).
"""

import json
import os
import sys
from typing import Iterable, Iterator, List, Optional, Sequence, Tuple

import jax
import numpy as np
from absl import flags, logging

from vit_jax.base import cli, errors, no_clobber, storage
from vit_jax.checkpoints import checkpoint_family, formats, hub, naflex_reading, npz, transfer
from vit_jax.data import image_files, prompt_templates
from vit_jax.families.vit import naflex_model as vit_naflex_model
from vit_jax.families.vit import model as vit
from vit_jax.models import family_registry

IMAGENET_LABELS_URL = "https://storage.googleapis.com/bit_models/ilsvrc2012_wordnet_lemmas.txt"
IMAGENET_CLASSES = 1000

FLAGS = flags.FLAGS
Prediction = List[Tuple[int, float]]  # (class index, probability), most likely first


def cache_dir() -> str:
  """~/.cache/vit_jax, or under $XDG_CACHE_HOME where the user moved their caches."""
  root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
  return os.path.join(root, "vit_jax")


def score_batches(module: vit.VisionTransformer, params, image_paths: Sequence[str], *,
                  image_size: Optional[npz.ImageSize] = None,
                  batch_size: int = 32, multi_label: bool = False,
                  max_patches: Optional[int] = None) -> Iterator[np.ndarray]:
  """Class probabilities [n, K] of the images, a batch at a time, in order: softmax, or
  for a multi-label head each class's own sigmoid score.

  image_size (a side or (height, width)) defaults to the checkpoint's own resolution; at
  another the model resizes its position embedding (see hub.load_for_inference).
  max_patches (MAP-pooled models): NaFlex's reading instead, each image at its
  own aspect ratio in at most that many patches (vit_jax.families.vit.naflex_model); a
  budget whose batch cannot fit the device is refused in one line
  (naflex_model.check_budget_fits).
  The last batch is padded, so every batch has one shape and the model compiles once.
  """
  batch_size = max(1, min(batch_size, len(image_paths)))
  if max_patches:
    vit_naflex_model.check_budget_fits(module, max_patches, batch_size)
    grid = npz.native_image_size(module, params) // module.patch_size
    naflex = vit_naflex_model.from_vit(module, grid)
    load = lambda path: image_files.load_naflex(path, module.patch_size, max_patches)
    forward = lambda p, *inputs: naflex.apply({"params": p}, *inputs)
  else:
    height, width = npz.side_pair(image_size or npz.native_image_size(module, params))
    load = lambda path: (image_files.load_image(path, (height, width)),)
    forward = lambda p, images: module.apply({"params": p}, images, train=False)
  activation = jax.nn.sigmoid if multi_label else jax.nn.softmax
  probabilities = jax.jit(lambda p, *inputs: activation(forward(p, *inputs)))

  params = jax.device_put(params)  # once, not with every batch
  for start in range(0, len(image_paths), batch_size):
    paths = image_paths[start:start + batch_size]
    items = [load(path) for path in paths]
    items += [items[-1]] * (batch_size - len(paths))
    inputs = [np.stack(part) for part in zip(*items)]
    yield np.asarray(jax.device_get(probabilities(params, *inputs)))[:len(paths)]


def top_classes(probabilities: np.ndarray, top_k: int) -> List[Prediction]:
  """The top_k (class index, probability) of each row, most likely first (ties: lower
  index first)."""
  order = np.argsort(-probabilities, axis=-1, kind="stable")[:, :top_k]
  return [list(zip(classes.tolist(), np.take(row, classes).tolist()))
          for classes, row in zip(order, probabilities)]


def classify(module: vit.VisionTransformer, params, image_paths: Sequence[str], *,
             image_size: Optional[npz.ImageSize] = None, top_k: int = 5,
             batch_size: int = 32,
             multi_label: bool = False) -> List[Prediction]:
  """Top-k (class index, probability) per image, in the order of image_paths (see
  score_batches)."""
  return [prediction for batch in score_batches(
      module, params, image_paths, image_size=image_size, batch_size=batch_size,
      multi_label=multi_label) for prediction in top_classes(batch, top_k)]


def json_record(path: str, probabilities: np.ndarray, top_k: int, names: Optional[List[str]],
                multi_label: bool, threshold: float) -> dict:
  """One image's --json record: path, top_k [{class, name, probability}], and for a
  multi-label head every class's score and the names at or over the threshold."""
  name = (lambda index: names[index]) if names else (lambda index: None)
  (top,) = top_classes(probabilities[None], top_k)
  record = {"path": path, "top_k": [{"class": index, "name": name(index), "probability": p}
                                    for index, p in top]}
  if multi_label:
    record["scores"] = probabilities.tolist()
    record["labels"] = [name(index) if names else index
                        for index in np.flatnonzero(probabilities >= threshold).tolist()]
  return record


def read_labels(path: str) -> List[str]:
  """One class name per line."""
  try:
    return [line.strip() for line in storage.read_text(path, "utf-8-sig").splitlines()]
  except OSError as e:
    raise errors.InvalidInput(f"cannot read labels {path}: {e.strerror or e}") from None
  except UnicodeDecodeError as e:
    raise errors.InvalidInput(f"--labels={path} is not UTF-8 text (byte {e.start}: "
                              f"{e.reason}): pass a text file with one class name per "
                              "line") from None


def imagenet_labels_path() -> str:
  return os.path.join(cache_dir(), os.path.basename(IMAGENET_LABELS_URL))


def imagenet_labels() -> Optional[List[str]]:
  """The ImageNet class names, fetched once into the cache; None (and a warning) offline."""
  path = imagenet_labels_path()
  if not os.path.exists(path):
    try:
      transfer.fetch(IMAGENET_LABELS_URL, path, verbose=False)
    except transfer.DownloadError as e:
      logging.warning("no ImageNet class names, showing class indices: %s", e)
      return None
  return read_labels(path)


def stored_multi_label(checkpoint_path: str) -> bool:
  """Whether a run saved the checkpoint's head as multi-label (sigmoid scores)."""
  return not formats.is_foreign(checkpoint_path) and npz.read_multi_label(checkpoint_path)


def stored_class_names(checkpoint_path: Optional[str]) -> Optional[List[str]]:
  """The names a run saved in its params.npz (see npz.read_class_names); None for other
  files (released checkpoints, timm / HF models)."""
  if checkpoint_path is None or formats.is_foreign(checkpoint_path):
    return None
  return npz.read_class_names(checkpoint_path)


def class_names(num_classes: int, labels_path: Optional[str] = None,
                checkpoint_path: Optional[str] = None) -> Optional[List[str]]:
  """Names from --labels, else those saved with the checkpoint (a folder-trained run's),
  else ImageNet's for a 1000-way head, else None (indices)."""
  stored = None if labels_path else stored_class_names(checkpoint_path)
  if labels_path:
    names = read_labels(labels_path)
  elif stored is not None and len(stored) == num_classes:
    return stored
  elif num_classes == IMAGENET_CLASSES:
    names = imagenet_labels()
  else:
    return None
  if names is not None and len(names) != num_classes:
    source = labels_path or imagenet_labels_path()
    raise errors.InvalidInput(
        f"{source} has {len(names)} names but the model has {num_classes} classes")
  return names


def check_trained_head(params, checkpoint: str) -> None:
  """A head of one class or of zero weights (what masked-patch-prediction and other
  feature-only runs export) gives every image the same answer: refuse it."""
  kernel = np.asarray(params["head"]["kernel"])
  if kernel.shape[-1] > 1 and np.any(kernel):
    return
  what = "a 1-class head" if kernel.shape[-1] == 1 else "an all-zero head"
  raise errors.InvalidInput(
      f"{checkpoint} has no trained classification head ({what}, as masked-patch-prediction "
      "pre-training exports): its predictions would mean nothing; fine-tune it on labelled "
      "data first (--config.pretrained), or use it for features with vit_jax.fewshot or "
      "vit_jax.visualize")


def format_prediction(path: str, prediction: Prediction, names: Optional[List[str]]) -> str:
  lines = [f"{path}:"]
  for index, prob in prediction:
    lines.append(f"  {prob:.4f}  {index:5d}  {names[index] if names else ''}".rstrip())
  return "\n".join(lines)


def zero_shot_batches(image_paths: Sequence[str], flag_values) -> Tuple[
    List[str], bool, Iterable[np.ndarray]]:
  """(class names, sigmoid scores?, [[images, classes]]) of --classes through an image-text
  checkpoint's zero-shot part (class embeddings once, images in batches)."""
  checkpoint = flag_values.checkpoint
  if flag_values.labels:
    raise cli.UsageError("--labels names a classifier's outputs; with --classes the class "
                         "names are the ones given: drop --labels")
  family = checkpoint_family.of(checkpoint)
  if family.zero_shot is None:
    titles = family_registry.titles_with("zero_shot")
    raise errors.InvalidInput(
        f"--classes scores classes zero-shot through an image-text model ({titles}); "
        f"{checkpoint} is no such model: drop --classes (its own head classifies)")
  names = prompt_templates.parse_class_names(flag_values.classes)
  templates = prompt_templates.parse_templates(flag_values.templates)
  requested = flag_values.image_size  # (height, width) or None
  if requested and requested[0] != requested[1]:
    raise cli.UsageError(f"--image_size: an image-text model takes square images, got "
                         f"{requested[0]}x{requested[1]}")
  model = family.zero_shot.open_model(checkpoint, tokenizer=flag_values.tokenizer)
  zcls = model.class_embeddings(*prompt_templates.prompt_texts(names, templates, True))
  zimg = model.embed_images(image_paths, image_size=requested and requested[0],
                            max_patches=flag_values.max_patches,
                            batch_size=flag_values.batch_size)
  return names, model.sigmoid, [model.scores(zimg, zcls)]


def classifier_batches(image_paths: Sequence[str], flag_values) -> Tuple[
    Optional[List[str]], bool, Iterator[np.ndarray]]:
  """(class names, multi-label?, probabilities batch by batch) of a classifier checkpoint;
  says on standard error which reading it uses (NaFlex at a budget, or square images)."""
  checkpoint = flag_values.checkpoint
  path = hub.resolve(checkpoint)  # released and hf-hub: names: fetched first
  reading = naflex_reading.of_file(path, flag_values.max_patches)
  naflex_reading.check_square_size(checkpoint, reading, flag_values.image_size)
  module, params, image_size = hub.load_for_inference(
      path, flag_values.image_size, allow_nonfinite=flag_values.allow_nonfinite)
  if reading.max_patches:  # a family NaFlex does not run says so in one line
    family_registry.for_module(module).refuse("naflex", checkpoint)
  check_trained_head(params, checkpoint)
  names = class_names(module.num_classes, flag_values.labels, checkpoint_path=path)
  multi_label = stored_multi_label(path)
  square = f"square images, {image_size[0]}x{image_size[1]} px"
  print(f"{checkpoint}: {reading.describe(square)}", file=sys.stderr)
  return names, multi_label, score_batches(module, params, image_paths, image_size=image_size,
                                           batch_size=flag_values.batch_size,
                                           multi_label=multi_label,
                                           max_patches=reading.max_patches)


@cli.command
def main(argv, flag_values: flags.FlagValues = FLAGS):
  image_paths = image_files.image_arguments(argv)
  if flag_values.json:  # before the slow load: an existing file is not clobbered
    no_clobber.claim_output_file(flag_values.json, "predict", flag_values.overwrite,
                                 stdout_ok=True, owns=no_clobber.records_with("path", "top_k"))
  if flag_values.max_patches and flag_values.image_size:
    raise cli.UsageError("--max_patches reads each image at its own size (NaFlex): leave "
                         "--image_size out")
  read = zero_shot_batches if flag_values.classes else classifier_batches
  names, multi_label, batches = read(image_paths, flag_values)
  records = []
  rows = (row for batch in batches for row in batch)
  for image, probabilities in zip(image_paths, rows):
    top_k = min(flag_values.top_k, probabilities.shape[-1])
    if flag_values.json:
      records.append(json_record(image, probabilities, top_k, names, multi_label,
                                 flag_values.threshold))
    else:
      print(format_prediction(image, top_classes(probabilities[None], top_k)[0], names))
  if flag_values.json:
    no_clobber.write_text(flag_values.json,
                          json.dumps(records, indent=1, ensure_ascii=False) + "\n")
    to_stdout = flag_values.json == no_clobber.STDOUT  # then standard output is the JSON only
    print(f"wrote {len(records)} predictions ({'sigmoid scores' if multi_label else 'softmax'})"
          f" to {'standard output' if to_stdout else flag_values.json}",
          file=sys.stderr if to_stdout else sys.stdout)


def define_flags(flag_values: flags.FlagValues = FLAGS) -> None:
  """The command's flags; not defined on import, so importers' flags stay their own."""
  define = dict(flag_values=flag_values)
  flags.DEFINE_string("checkpoint", None, hub.CHECKPOINT_HELP,
                      **define)
  flags.DEFINE(cli.ImageSizeParser(), "image_size", None,
               cli.image_size_help(npz.IMAGE_SIZE_HELP), flag_values=flag_values)
  flags.DEFINE_boolean("allow_nonfinite", False, npz.ALLOW_NONFINITE_HELP, **define)
  flags.DEFINE_integer("max_patches", None, naflex_reading.REQUEST_HELP, lower_bound=0,
                       **define)
  flags.DEFINE_integer("batch_size", 32, "Images per forward pass.", lower_bound=1, **define)
  flags.DEFINE_integer("top_k", 5, "Classes shown per image.", lower_bound=1, **define)
  flags.DEFINE_string("labels", None, "Class names, one per line; default: ImageNet's for "
                      "1000-way heads, else class indices.", **define)
  flags.DEFINE_string("json", None, "Write the predictions to this JSON file, or to standard "
                      "output for '-' (a list, one record per image: path, top_k [{class, "
                      "name, probability}], and for multi-label checkpoints scores and labels) "
                      "instead of printing them.", **define)
  cli.define_finite_float("threshold", 0.5, "Multi-label checkpoints: the --json labels are "
                          "the classes scored at least this.", flag_values, lower_bound=0,
                          upper_bound=1)
  titles = family_registry.titles_with("zero_shot")
  flags.DEFINE_string("classes", None, f"An image-text checkpoint ({titles}): score these "
                      "classes zero-shot (cat,dog,... or @FILE, one a line).", **define)
  flags.DEFINE_string("templates", "clip_paper", "With --classes: " +
                      prompt_templates.TEMPLATES_HELP, **define)
  flags.DEFINE_string("tokenizer", None, "With --classes: the text tower's vocabulary "
                      "(NAME.txt, NAME.model, tokenizer.json); default: the file beside the "
                      "checkpoint.", **define)
  flags.DEFINE_boolean("overwrite", False, no_clobber.OVERWRITE_HELP, **define)
  flags.mark_flag_as_required("checkpoint", flag_values=flag_values)


if __name__ == "__main__":
  cli.run(main, define_flags)
