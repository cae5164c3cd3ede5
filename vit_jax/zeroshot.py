"""Zero-shot classification with a two-tower model (LiT, SigLIP, SigLIP 2):

  python -m vit_jax.zeroshot --checkpoint=NAME|PATH --classes=cat,dog|@FILE \
      [--templates='a photo of a {}.|{}'] [--tokenizer=PATH] IMAGE... [--json=PATH|-]

PATH is a released name (fetched first: vit_jax.checkpoints.two_tower_names), a LiT /
big_vision SigLIP .npz or a Hugging Face SigLIP / SigLIP 2 folder (load_two_tower). Each class is embedded once per run: every template filled with
its name, the text embeddings averaged and normalised. Images are squashed to the model's
resolution (bilinear, [-1, 1]) and embedded in batches. Scores are read the way each family
is meant to be read: LiT a softmax over the classes, SigLIP a sigmoid per class.
"""

import json
import os
import sys
from typing import List, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import tqdm
from absl import flags

from vit_jax import cli, errors, no_clobber, storage
from vit_jax.data import text_tokens
from vit_jax.checkpoints import two_tower_load, two_tower_names
from vit_jax.models import two_tower

FLAGS = flags.FLAGS
DEFAULT_IMAGE_SIZE = 224


def parse_names(value: str) -> List[str]:
  """'cat,dog' or '@FILE' (one name a line) -> names; empty ones refused."""
  if value.startswith("@"):
    names = [line.strip() for line in storage.read_text(value[1:]).splitlines()]
    names = [n for n in names if n]
  else:
    names = [n.strip() for n in value.split(",")]
  if not names or not all(names):
    raise cli.UsageError(f"--classes={value!r} has an empty class name: give names separated "
                         "by commas, or @FILE with one name a line")
  return names


def parse_templates(value: str) -> List[str]:
  """'a photo of a {}.|{}' or '@FILE' -> templates, each with exactly one '{}'."""
  templates = (storage.read_text(value[1:]).splitlines() if value.startswith("@")
               else value.split("|"))
  templates = [t.strip() for t in templates if t.strip()]
  bad = [t for t in templates if t.count("{}") != 1]
  if not templates or bad:
    raise cli.UsageError(f"--templates: each prompt needs exactly one {{}} for the class name "
                         f"(got {bad[0] if bad else value!r}); separate prompts with |")
  return templates


def class_embeddings(model, params, tokenize, names: Sequence[str], templates: Sequence[str]):
  """[classes, D]: per class, the mean of its templates' text embeddings, normalised."""
  texts = [t.format(n) for n in names for t in templates]
  tokens = tokenize(texts)
  embed = jax.jit(lambda p, x: model.apply({"params": p}, x, method=model.embed_texts))
  z = np.concatenate([np.asarray(embed(params, tokens[i:i + 64]))
                      for i in range(0, len(tokens), 64)])
  return np.asarray(two_tower.normalize(z.reshape(len(names), len(templates), -1).mean(1)))


def image_scores(model, params, family: str, zcls, paths: Sequence[str], image_size: int,
                 batch_size: int) -> np.ndarray:
  """[images, classes] scores (softmax for LiT, sigmoid for SigLIP), images in batches."""
  from vit_jax.data import preprocess_np  # pylint: disable=import-outside-toplevel (PIL)

  @jax.jit
  def score(p, images):
    zimg = model.apply({"params": p}, images, method=model.embed_images)
    logits = model.apply({"params": p}, zimg, jnp.asarray(zcls), method=model.logits)
    return two_tower.scores(logits, family)

  rows = []
  for start in tqdm.tqdm(range(0, len(paths), batch_size), desc="images", unit="batch",
                         disable=len(paths) <= batch_size, file=sys.stderr):
    chunk = paths[start:start + batch_size]
    images = np.stack([preprocess_np.eval_resize(preprocess_np.decode_image(
        storage.read_bytes(p)), image_size) for p in chunk])
    padded = np.concatenate([images, np.zeros((batch_size - len(chunk),) + images.shape[1:],
                                              images.dtype)])
    rows.append(np.asarray(score(params, padded))[:len(chunk)])
  return np.concatenate(rows)


def records(paths, names, scores, top_k: int):
  """predict's JSON records (path, top_k) plus `scores` in --classes order."""
  out = []
  for path, row in zip(paths, scores):
    order = np.argsort(-row, kind="stable")[:top_k]
    out.append({"path": path,
                "top_k": [{"class": int(i), "name": names[i], "score": float(row[i])}
                          for i in order],
                "scores": [float(s) for s in row]})
  return out


@cli.command
def main(argv, flag_values: flags.FlagValues = FLAGS):
  paths = argv[1:]
  if not paths:
    raise cli.UsageError("give one or more images")
  if flag_values.json:
    no_clobber.claim_output_file(flag_values.json, "zeroshot", flag_values.overwrite,
                                 stdout_ok=True)
  names = parse_names(flag_values.classes)
  templates = parse_templates(flag_values.templates)
  checkpoint = flag_values.checkpoint
  if checkpoint in two_tower_names.NAMES and not os.path.exists(checkpoint):
    checkpoint = two_tower_names.fetch(checkpoint)  # into checkpoints/ unless already there
  model, params, info = two_tower_load.load_two_tower(checkpoint, bert_heads=flag_values.bert_heads)
  tokenize = text_tokens.for_model(flag_values.tokenizer or info.tokenizer, family=info.family,
                                   max_len=info.text_length, bert=info.text_tower == "bert")
  zcls = class_embeddings(model, params, tokenize, names, templates)
  image_size = flag_values.image_size or info.image_size or DEFAULT_IMAGE_SIZE
  try:
    scores = image_scores(model, params, info.family, zcls, paths, image_size,
                          flag_values.batch_size)
  except FileNotFoundError as e:
    raise errors.InvalidInput(f"image not found: {e.filename or e}") from None
  result = records(paths, names, scores, min(flag_values.top_k, len(names)))
  reading = "softmax over the classes" if info.family == "lit" else "sigmoid per class"
  if flag_values.json:
    no_clobber.write_text(flag_values.json, json.dumps(result, indent=1, ensure_ascii=False)
                          + "\n")
    to_stdout = flag_values.json == no_clobber.STDOUT
    print(f"wrote {len(result)} zero-shot predictions ({reading}) to "
          f"{'standard output' if to_stdout else flag_values.json}",
          file=sys.stderr if to_stdout else sys.stdout)
    return
  print(f"zero-shot scores ({info.family}: {reading})")
  for record in result:
    top = ", ".join(f"{c['name']} {c['score']:.3f}" for c in record["top_k"])
    print(f"{record['path']}: {top}")


def define_flags(flag_values: flags.FlagValues = FLAGS) -> None:
  define = dict(flag_values=flag_values)
  flags.DEFINE_string("checkpoint", None, "A released name (LiT-B16B_2, SigLIP2-B_16-224, ...: "
                      "python -m vit_jax.download --list two-tower; fetched into checkpoints/), "
                      "a LiT / SigLIP .npz or a Hugging Face SigLIP / SigLIP 2 folder.", **define)
  flags.DEFINE_integer("bert_heads", None, "Attention heads of a BERT text tower whose width "
                       "is neither 768 nor 1024 (its arrays do not show it).", lower_bound=1,
                       **define)
  flags.DEFINE_string("classes", None, "Class names: cat,dog,... or @FILE (one a line).",
                      **define)
  flags.DEFINE_string("templates", "{}", "Prompts with {} for the class name, separated by | "
                      "(or @FILE, one a line); each class's embedding is their mean. Default: "
                      "the bare class names.", **define)
  flags.DEFINE_string("tokenizer", None, "The model's vocabulary (NAME.txt: BERT WordPiece; "
                      "NAME.model: sentencepiece; tokenizer.json); default: the file found "
                      "beside the checkpoint.", **define)
  flags.DEFINE_integer("image_size", None, "Resize images to this side; default: the "
                       "checkpoint's own resolution.", lower_bound=1, **define)
  flags.DEFINE_integer("batch_size", 32, "Images per forward pass.", lower_bound=1, **define)
  flags.DEFINE_integer("top_k", 5, "Classes shown per image.", lower_bound=1, **define)
  flags.DEFINE_string("json", None, "Write the results to this JSON file, or standard output "
                      "for '-': one record per image (path, top_k [{class, name, score}], "
                      "scores in --classes order).", **define)
  flags.DEFINE_boolean("overwrite", False, no_clobber.OVERWRITE_HELP, **define)
  flags.mark_flag_as_required("checkpoint", flag_values=flag_values)
  flags.mark_flag_as_required("classes", flag_values=flag_values)


if __name__ == "__main__":
  cli.run(main, define_flags)
