"""Writes a dataset as ArrayRecord shards for the Grain loader:
python -m vit_jax.make_arrayrecord SOURCE --output=DIR, or
python -m vit_jax.make_arrayrecord --captions=FILE [--eval_captions=FILE] --output=DIR.

SOURCE is an image folder (train/<class>/ and test/<class>/ or validation/, or a
multi-label folder with labels.csv files) or a TFDS name (prepared in --tfds_data_dir; its
--splits). A captions file (IMAGE<TAB>CAPTION lines, images relative to the file, an image
on several lines having several captions) becomes the split train, --eval_captions the
split test, each image once with all its captions. The images are copied as they are
encoded (no re-encoding), with the class names and each split's fingerprint (what
dataset.json records for the source), so a run on DIR (--config.dataset=DIR
--config.loader=grain) records what it was made from.
Atomic and resumable (vit_jax.data.sources.arrayrecord): rerun the same command after a kill to
finish it. Needs no TensorFlow.
"""

import os
from typing import Dict, List, Optional

import numpy as np
import tqdm
from absl import flags

from vit_jax.base import cli, storage
from vit_jax.data import fingerprint
from vit_jax.data.sources import (
    arrayrecord, arrayrecord_output, captions_file, image_folder, multilabel_folder,
    tfds_arrayrecord)

FLAGS = flags.FLAGS


def _folder_splits(root: str):
  """[(name, IndexedSplit of files)], class names of an image folder."""
  if multilabel_folder.is_multilabel_folder(root):
    train, evaluation, names = multilabel_folder.multilabel_source(root)
  else:
    train, evaluation, names = image_folder.directory_source(root)
  eval_name = os.path.basename(image_folder.split_dirs(root)[1])
  return [("train", train), (eval_name, evaluation)], names


def _read_file(split):
  return lambda i: storage.read_bytes(os.fsdecode(split.data[i]))


def _file_work(parts):
  """(split name, payload, labels, fingerprint) of splits of image files."""
  return [(name, _read_file(split), split.labels, fingerprint.of_split(split))
          for name, split in parts]


def write(source: Optional[str], output: str, *, splits: List[str], tfds_data_dir=None,
          label_feature: str = "label", examples_per_shard: int = 10_000,
          captions: Optional[Dict[str, str]] = None) -> None:
  """Writes `source`'s splits, or the captions files {split: path}, into `output` (see the
  module docstring)."""
  output = os.path.expanduser(output)
  for origin in captions.values() if captions else [source]:
    arrayrecord_output.check(os.path.expanduser(origin), output)
  texts = {}
  if captions:
    parts = [(name, captions_file.captions_split(os.path.expanduser(path)))
             for name, path in captions.items()]
    names, work = [], _file_work(parts)
    texts = {name: [split.captions.of(i) for i in range(len(split))] for name, split in parts}
  elif os.path.isdir(os.path.expanduser(source)):
    parts, names = _folder_splits(os.path.expanduser(source))
    work = _file_work(parts)
  else:
    builder = tfds_arrayrecord.open_builder(source, tfds_data_dir)
    names = tfds_arrayrecord.class_names(builder, label_feature)
    work = []
    for name in splits:
      split = tfds_arrayrecord.open_split(builder, name, label_feature, tfds_data_dir)
      work.append((name, split.data.__getitem__, split.labels, split.fingerprint))
  total = sum(len(labels) for _, _, labels, _ in work)
  with tqdm.tqdm(total=total, unit="img", desc=f"writing {output}") as bar:
    for name, payload, labels, split_fingerprint in work:
      arrayrecord.write_split(output, name, payload, np.asarray(labels), split_fingerprint,
                              names, captions=texts.get(name),
                              examples_per_shard=examples_per_shard, progress=bar.update)
  what = (f"{sum(len(example) for split in texts.values() for example in split)} captions"
          if captions else f"{len(names)} classes")
  print(f"{output}: {', '.join(f'{name} {len(labels)}' for name, _, labels, _ in work)} "
        f"examples, {what}; train on it with --config.dataset={output} "
        "--config.loader=grain")


@cli.command
def main(argv, flag_values: flags.FlagValues = FLAGS):
  captions = {name: path for name, path in (("train", flag_values.captions),
                                            ("test", flag_values.eval_captions)) if path}
  if captions and len(argv) != 1:
    raise cli.UsageError("give either SOURCE or --captions / --eval_captions, not both")
  if not captions and len(argv) != 2:
    raise cli.UsageError("give one SOURCE (an image folder or a TFDS name), or --captions=FILE")
  if not flag_values.output:
    raise cli.UsageError("give --output=DIR, the folder to write the shards into")
  if flag_values.examples_per_shard < 1:
    raise cli.UsageError(f"--examples_per_shard={flag_values.examples_per_shard} must be >= 1")
  write(None if captions else argv[1], flag_values.output, splits=flag_values.splits,
        tfds_data_dir=flag_values.tfds_data_dir, label_feature=flag_values.label_feature,
        examples_per_shard=flag_values.examples_per_shard, captions=captions)


def define_flags(flag_values: flags.FlagValues = flags.FLAGS) -> None:
  """The command's flags; not defined on import, so importers' flags stay their own."""
  define = dict(flag_values=flag_values)
  flags.DEFINE_string("output", None, "Folder to write the shards and arrayrecord.json into.",
                      **define)
  flags.DEFINE_list("splits", ["train", "test"], "TFDS splits to write (an image folder's "
                    "are train and test/validation).", **define)
  flags.DEFINE_string("tfds_data_dir", None, "TFDS data directory (TFDS sources).", **define)
  flags.DEFINE_string("label_feature", "label", "TFDS ClassLabel feature of the labels.",
                      **define)
  flags.DEFINE_integer("examples_per_shard", 10_000, "Examples per shard file.", **define)
  flags.DEFINE_string("captions", None, "A captions file (IMAGE<TAB>CAPTION lines) to write "
                      "as the split train, instead of SOURCE.", **define)
  flags.DEFINE_string("eval_captions", None, "A captions file of held-out images to write "
                      "as the split test.", **define)


if __name__ == "__main__":
  cli.run(main, define_flags)
