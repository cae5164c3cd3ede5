"""Zero-shot classification with an image-text model (any model family with a zero-shot
part, vit_jax.models.family_contract.ZeroShot):

  python -m vit_jax.zeroshot --checkpoint=NAME|PATH --classes=cat,dog|@FILE \
      [--templates='a photo of a {}.|{}'] [--tokenizer=PATH] IMAGE... [--json=PATH|-]

  python -m vit_jax.zeroshot --checkpoint=... --folder=DIR        # top-1 on DIR/CLASS/IMAGE
  python -m vit_jax.zeroshot --checkpoint=... --captions=FILE     # retrieval recall@1/5/10

PATH is a released name (fetched first), a model file or a Hugging Face folder of such a
family (its guide in docs/). Each class is embedded once per run: every template filled
with its name, the text embeddings averaged and normalised. Images are squashed to the
model's resolution (bilinear, [-1, 1]), or read at their own aspect ratio within a patch
budget (NaFlex: --max_patches, and by default for a NaFlex model folder at its processor's
budget), and embedded in batches no larger than the images there are. Scores are read the
way each model is meant to be read (a softmax over the classes, or a sigmoid per class).
"""

import json
import sys
import tempfile

import numpy as np
from absl import flags

from vit_jax.base import cli, errors, no_clobber
from vit_jax.checkpoints import checkpoint_family
from vit_jax.data import image_files, prompt_templates
from vit_jax.models import family_registry
from vit_jax.training.evaluators import image_text
from vit_jax.training.runs import step_files
from vit_jax.training.scores import retrieval

FLAGS = flags.FLAGS
KIND = "zeroshot"
OWN_RECORDS = no_clobber.records_with("path", "top_k", "scores")  # its --json of images


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


def _report(flag_values, result, summary: str) -> None:
  """result (a list of records, or metrics stamped as this command's) to --json."""
  if flag_values.json:
    if isinstance(result, dict):
      result = {**no_clobber.written_by(KIND), **result}
    no_clobber.write_text(flag_values.json,
                          json.dumps(result, indent=1, ensure_ascii=False) + "\n")
    to_stdout = flag_values.json == no_clobber.STDOUT
    print(f"wrote {summary} to {'standard output' if to_stdout else flag_values.json}",
          file=sys.stderr if to_stdout else sys.stdout)


def open_model(checkpoint: str, tokenizer, bert_heads):
  """The checkpoint's family's zero-shot model, or one line for a family that scores no
  texts. A run's checkpoint of any step (WORKDIR/checkpoints/STEP) is read as that step's
  params.npz with the run's vocabulary (training.runs.step_files), loaded whole before the
  temporary copy goes."""
  with tempfile.TemporaryDirectory() as folder:
    checkpoint = step_files.model_file(checkpoint, folder)
    family = checkpoint_family.of(checkpoint)
    if family.zero_shot is None:
      titles = family_registry.titles_with("zero_shot")
      raise errors.InvalidInput(f"{checkpoint} is {family.a_title} model, which scores no "
                                f"texts: zero-shot takes an image-text model ({titles})")
    return family.zero_shot.open_model(checkpoint, tokenizer=tokenizer, bert_heads=bert_heads)


@cli.command
def main(argv, flag_values: flags.FlagValues = FLAGS):
  paths = argv[1:]
  if [bool(paths), bool(flag_values.folder), bool(flag_values.captions)].count(True) != 1:
    raise cli.UsageError("give IMAGE files, or --folder=DIR, or --captions=FILE (one of them)")
  if flag_values.json:  # before the slow load: an existing file is not clobbered
    no_clobber.claim_output_file(flag_values.json, KIND, flag_values.overwrite,
                                 stdout_ok=True, owns=OWN_RECORDS)
  if flag_values.max_patches and flag_values.image_size:
    raise cli.UsageError("--max_patches reads each image at its own size (NaFlex): leave "
                         "--image_size out (or pass --max_patches=0 for squares)")
  templates = prompt_templates.parse_templates(flag_values.templates)
  if paths and not flag_values.classes:
    raise cli.UsageError("--classes=cat,dog,... (or @FILE) names the classes to score")
  names = (prompt_templates.parse_class_names(flag_values.classes) if flag_values.classes
           else None)
  # The inputs are read before the slow load: a mistake in them is told at once.
  if flag_values.captions:
    images, captions, owner = image_files.read_captions(flag_values.captions)
  elif flag_values.folder:
    paths, labels, folder_classes = image_files.folder_images(flag_values.folder)
    if names is not None and len(names) != len(folder_classes):
      raise cli.UsageError(f"--classes has {len(names)} names for the folder's "
                           f"{len(folder_classes)} classes ({', '.join(folder_classes[:5])}...)")
    names = names or folder_classes
  else:
    paths = image_files.image_arguments(argv)
  if names is not None:
    prompt_templates.check_class_names(
        names, flag_values.canonicalize, switch="--nocanonicalize",
        what="--classes" if flag_values.classes else f"the class folders of {flag_values.folder}")
  model = open_model(flag_values.checkpoint, flag_values.tokenizer, flag_values.bert_heads)
  embed = lambda image_paths: model.embed_images(
      image_paths, image_size=flag_values.image_size, max_patches=flag_values.max_patches,
      batch_size=flag_values.batch_size)
  if flag_values.captions:
    metrics = image_text.caption_recall(model, embed(images), captions, owner,
                                        flag_values.canonicalize)
    if not flag_values.json:
      print(" ".join(f"{k} {v:.4f}" for k, v in metrics.items()))
    return _report(flag_values, metrics, f"recall@k of {len(images)} images")
  scores = image_text.class_scores(model, embed(paths), names, templates,
                                  flag_values.canonicalize)
  reading = model.reading.split(": ", 1)[1]
  if flag_values.folder:
    metrics = {"top1": retrieval.top1(scores, labels), "images": len(paths),
               "classes": names}
    if not flag_values.json:
      print(f"zero-shot top-1 {metrics['top1']:.4f} on {len(paths)} images, {len(names)} "
            "classes")
    return _report(flag_values, metrics, "the zero-shot accuracy")
  result = records(paths, names, scores, min(flag_values.top_k, len(names)))
  if not flag_values.json:
    budget = model.patch_budget(flag_values.image_size, flag_values.max_patches)
    side = model.image_side(flag_values.image_size)
    print(f"zero-shot scores ({model.reading}; images "
          + (f"at their aspect ratio in {budget} patches)" if budget else
             f"squashed to {side}x{side} px)"))
    for record in result:
      print(f"{record['path']}: " + ", ".join(f"{c['name']} {c['score']:.3f}"
                                              for c in record["top_k"]))
  return _report(flag_values, result, f"{len(result)} zero-shot predictions ({reading})")


def define_flags(flag_values: flags.FlagValues = FLAGS) -> None:
  define = dict(flag_values=flag_values)
  lists = " or ".join(f"--list {f.fetcher.folder}" for f in family_registry.families()
                      if f.zero_shot is not None and f.fetcher is not None)
  titles = family_registry.titles_with("zero_shot")
  flags.DEFINE_string("checkpoint", None, "An image-text model: a released name (python -m "
                      f"vit_jax.download {lists} shows them; fetched into checkpoints/), its "
                      f".npz or its Hugging Face folder ({titles}).", **define)
  flags.DEFINE_integer("bert_heads", None, "Attention heads of a BERT text tower whose width "
                       "is neither 768 nor 1024 (its arrays do not show it).", lower_bound=1,
                       **define)
  flags.DEFINE_string("classes", None, "Class names: cat,dog,... or @FILE (one a line); with "
                      "--folder, display names for its class folders in sorted order.", **define)
  flags.DEFINE_string("folder", None, "Zero-shot top-1 accuracy on DIR/CLASS/IMAGE files "
                      "instead of scoring IMAGE arguments (class names: the folder names).",
                      **define)
  flags.DEFINE_string("captions", None, "Image <-> text retrieval recall@1/5/10 on a file of "
                      "'IMAGE<TAB>CAPTION' lines (images relative to it; several captions per "
                      "image allowed).", **define)
  flags.DEFINE_string("templates", "clip_paper", prompt_templates.TEMPLATES_HELP, **define)
  flags.DEFINE_boolean("canonicalize", True, "Lower-case class names, prompts and captions "
                       "and drop their punctuation, as big_vision's evaluators do.", **define)
  flags.DEFINE_string("tokenizer", None, "The model's vocabulary (NAME.txt: BERT WordPiece; "
                      "NAME.model: sentencepiece; tokenizer.json); default: the file found "
                      "beside the checkpoint.", **define)
  flags.DEFINE_integer("image_size", None, "Squash images to this side (a square, also for "
                       "a NaFlex model); default: the checkpoint's own resolution.",
                       lower_bound=1, **define)
  flags.DEFINE_integer("max_patches", None, "NaFlex: read each image at its own aspect ratio "
                       "in at most this many patches (256, 576, 1024), as the NaFlex models "
                       "were trained; 0: squashed to a square (--image_size). Default: the "
                       "model's own reading (a Hugging Face NaFlex folder: its processor's "
                       "max_num_patches, 256 unless its preprocessor_config.json says; others "
                       "squashed).", lower_bound=0, **define)
  flags.DEFINE_integer("batch_size", image_text.IMAGE_BATCH, "Images per forward pass.",
                       lower_bound=1, **define)
  flags.DEFINE_integer("top_k", 5, "Classes shown per image.", lower_bound=1, **define)
  flags.DEFINE_string("json", None, "Write the results to this JSON file, or standard output "
                      "for '-': one record per image (path, top_k [{class, name, score}], "
                      "scores in --classes order).", **define)
  flags.DEFINE_boolean("overwrite", False, no_clobber.OVERWRITE_HELP, **define)
  flags.mark_flag_as_required("checkpoint", flag_values=flag_values)


if __name__ == "__main__":
  cli.run(main, define_flags)
