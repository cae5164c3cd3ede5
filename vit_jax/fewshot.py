"""python -m vit_jax.fewshot --checkpoint=CHECKPOINT --dataset=NAME_OR_DIR [--shots=1,5,10,25]

Few-shot linear probes (paper section 4.1) of a checkpoint's frozen representation,
printed as a table (and written as JSON with --json); the probes themselves are in
vit_jax.training.evaluators.fewshot_probes. A NaFlex run's params.npz is read as NaFlex
at the budget it records (--max_patches: another, 0: square images); the table says which.
"""

import json
import sys
from typing import Any, Dict, Iterable, Optional, Sequence, Tuple

import jax
import ml_collections
from absl import flags

from vit_jax.base import cli, no_clobber
from vit_jax.checkpoints import hub, naflex_reading, npz
from vit_jax.data.sources import registry
from vit_jax.families.vit import naflex_model
from vit_jax.models import family_registry
from vit_jax.training import config_defaults, sharding
from vit_jax.training.evaluators import fewshot_probes as probes

KIND = "fewshot"  # the writer's name in --json's no-clobber stamp (vit_jax.base.no_clobber)

def data_config(dataset: str, crop, train_split: str = "train", eval_split: str = "test",
                tfds_data_dir: Optional[str] = None, max_patches: Optional[int] = None,
                patch_size: Optional[int] = None) -> ml_collections.ConfigDict:
  """The keys open_dataset reads, for evaluation-only use at `crop` pixels (a side, or
  (height, width): evaluation resizes without cropping), or with max_patches as NaFlex
  patches of patch_size. ArrayRecord shards are read by the Grain loader (the command has
  no config.loader to set), the rest by tf.data."""
  config = ml_collections.ConfigDict({
      "dataset": dataset, "loader": None, "train_split": train_split,
      "eval_split": eval_split,
      "tfds_data_dir": tfds_data_dir, "tfds_manual_dir": None, "tfds_download": False,
      "shuffle_buffer": 1, "model": {"patch_size": patch_size},
      "pp": {"preset": "inception", "crop": crop, "resize": None, "flip": False,
             "mixup_alpha": 0.0, "max_patches": max_patches}})
  config.loader = registry.loader_for(config)
  return config


def parse_shots(values: Iterable[str]) -> Tuple[int, ...]:
  return cli.positive_numbers(values, int, "shots", example="1,5,10,25")


def format_table(report: Dict[str, Any], shots: Sequence[int]) -> str:
  lines = [f"{report['dataset']}: {report['feature_dim']}-d features, "
           f"{report['num_classes']} classes, {report['num_train']} train / "
           f"{report['num_test']} test examples; l2_reg={report['l2_reg']:g}, "
           f"{len(report['seeds'])} seeds; {report['reading']}",
           "shots  accuracy     std"]
  lines += [f"{k:5d}  {report[f'{k}shot']:8.4f}  {report[f'{k}shot_std']:6.4f}" for k in shots]
  return "\n".join(lines)


def run(flag_values) -> Dict[str, Any]:
  """Loads, extracts features, fits the probes; returns the report the command prints."""
  shots = parse_shots(flag_values.shots)
  checkpoint = flag_values.checkpoint
  path = hub.resolve(checkpoint)  # released and hf-hub: names: fetched first
  reading = naflex_reading.of_file(path, flag_values.max_patches)
  naflex_reading.check_square_size(checkpoint, reading, flag_values.image_size)
  module, params, image_size = hub.load_for_inference(
      path, flag_values.image_size, allow_nonfinite=flag_values.allow_nonfinite)
  crop = image_size[0] if image_size[0] == image_size[1] else image_size
  if reading.max_patches:  # the file's params on NaFlex batches; other families: one line
    family_registry.for_module(module).refuse("naflex", checkpoint)
    grid = npz.native_image_size(module, params) // module.patch_size
    module = naflex_model.from_vit(module, grid)
    naflex_model.check_budget_fits(module, reading.max_patches, flag_values.batch_size)
  dataset = probes.open_probe_dataset(data_config(
      flag_values.dataset, crop, flag_values.train_split, flag_values.eval_split,
      flag_values.tfds_data_dir, reading.max_patches,
      module.patch_size if reading.max_patches else None))
  mesh = sharding.make_mesh({"data": -1})
  parallel = sharding.batch_parallelism(mesh)
  batch_size = -(-flag_values.batch_size // parallel) * parallel  # whole rows per device
  shardings = sharding.param_shardings(params, mesh)
  params = jax.device_put(params, shardings)
  feature_fn = probes.feature_function(module, mesh, shardings)
  features = probes.split_features(feature_fn, params, dataset, batch_size,
                                   sharding.batch_sharding(mesh))
  seeds = list(range(flag_values.seeds))
  per_seed = probes.fewshot_accuracies(*features, shots=shots, seeds=seeds,
                                l2_reg=flag_values.l2_reg, num_classes=dataset.info.num_classes)
  train_features, train_labels, _, test_labels = features
  return {"checkpoint": checkpoint, "dataset": flag_values.dataset,
          "reading": reading.describe(f"square images, {image_size[0]}x{image_size[1]} px"),
          "feature_dim": int(train_features.shape[1]), "num_classes": dataset.info.num_classes,
          "num_train": len(train_labels), "num_test": len(test_labels),
          "l2_reg": flag_values.l2_reg,
          "seeds": seeds, **probes.summarize(per_seed),
          "per_seed": {str(k): v for k, v in per_seed.items()}}


@cli.command
def main(argv, flag_values=flags.FLAGS):
  cli.no_arguments(argv)
  cli.keep_tensorflow_off_accelerators()
  if flag_values.json:  # before the slow part
    no_clobber.claim_output_file(flag_values.json, KIND, flag_values.overwrite,
                                 stdout_ok=True)
  report = run(flag_values)
  to_stdout = flag_values.json == no_clobber.STDOUT  # then standard output is the JSON only
  print(format_table(report, parse_shots(flag_values.shots)),
        file=sys.stderr if to_stdout else sys.stdout)
  if flag_values.json:  # stamped: a rerun may replace it, nothing else is replaced
    no_clobber.write_text(flag_values.json, json.dumps(
        {**no_clobber.written_by(KIND), **report}, indent=2) + "\n")


def define_flags(flag_values=flags.FLAGS) -> None:
  """The command's flags; not defined on import, so importers' flags stay their own."""
  define = dict(flag_values=flag_values)
  flags.DEFINE_string("checkpoint", None, hub.CHECKPOINT_HELP,
                      **define)
  flags.DEFINE_string("dataset", None, "'digits', an image directory (train/ and test/ with "
                      "one folder per class) or a TFDS name.", **define)
  flags.DEFINE_list("shots", [str(k) for k in config_defaults.FEWSHOT_SHOTS],
                    "Examples per class.", **define)
  flags.DEFINE_integer("seeds", 3, "Random draws of the few-shot sets (seeds 0..n-1).",
                       lower_bound=1, **define)
  cli.define_finite_float("l2_reg", config_defaults.FEWSHOT_L2_REG, "Ridge regularisation "
                          "(> 0).", flag_values)
  flags.DEFINE(cli.ImageSizeParser(), "image_size", None,
               cli.image_size_help(npz.IMAGE_SIZE_HELP), flag_values=flag_values)
  flags.DEFINE_boolean("allow_nonfinite", False, npz.ALLOW_NONFINITE_HELP, **define)
  flags.DEFINE_integer("max_patches", None, naflex_reading.REQUEST_HELP, lower_bound=0,
                       **define)
  flags.DEFINE_integer("batch_size", 64, "Images per forward pass (rounded up to a multiple "
                       "of the device count).", lower_bound=1, **define)
  flags.DEFINE_string("train_split", "train", "TFDS split to draw the shots from.", **define)
  flags.DEFINE_string("eval_split", "test", "TFDS split to measure accuracy on.", **define)
  flags.DEFINE_string("tfds_data_dir", None, "TFDS data directory.", **define)
  flags.DEFINE_string("json", None, "Also write the report to this JSON file ('-': "
                      "standard output, the table then on standard error).", **define)
  flags.DEFINE_boolean("overwrite", False, no_clobber.OVERWRITE_HELP, **define)
  flags.mark_flags_as_required(["checkpoint", "dataset"], flag_values=flag_values)


if __name__ == "__main__":
  cli.run(main, define_flags)
