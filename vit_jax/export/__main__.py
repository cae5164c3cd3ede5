"""python -m vit_jax.export CHECKPOINT OUT --to=stablehlo|saved_model|tflite|onnx
    [--image_size=PX|HxW] [--batch=N|dynamic] [--dtype=float32|bfloat16|float16]
    [--with_preprocessing] [--max_patches=N] [--overwrite]

Writes the checkpoint (anything load_npz reads, or a released name) as a serving artefact
into the folder OUT with a metadata.json beside it, after reloading it in its own runtime
and comparing its logits with the Flax model's (see vit_jax.export.api). A model whose
family exports it as named functions (an image-text model's image and text towers) is
written as OUT/<function>/ folders, each checked in its runtime (vit_jax.export.functions).
"""

from absl import flags

from vit_jax.base import cli
from vit_jax.checkpoints import npz
from vit_jax.export import api

FLAGS = flags.FLAGS


@cli.command
def main(argv, flag_values=FLAGS):
  if len(argv) != 3:
    raise cli.UsageError("pass CHECKPOINT and OUT, e.g. python -m vit_jax.export "
                         "params.npz exported/ --to=saved_model")
  result = api.export(argv[1], argv[2], to=flag_values.to, image_size=flag_values.image_size,
                      batch=flag_values.batch, dtype=flag_values.dtype,
                      with_preprocessing=flag_values.with_preprocessing,
                      overwrite=flag_values.overwrite, max_patches=flag_values.max_patches)
  print(result.summary())


def define_flags(flag_values=flags.FLAGS) -> None:
  """The command's flags; not defined on import, so importers' flags stay their own."""
  define = dict(flag_values=flag_values)
  flags.DEFINE_string("to", None, f"Format: {', '.join(api.FORMATS)}.", **define)
  flags.DEFINE(cli.ImageSizeParser(), "image_size", None, cli.image_size_help(
      "the size traced at (metadata.json records it); " + npz.IMAGE_SIZE_HELP), **define)
  flags.DEFINE_string("batch", None, "Batch dimension: 'dynamic' or a number. Default: "
                      "dynamic (tflite: 1).", **define)
  flags.DEFINE_enum("dtype", "float32", list(api.DTYPES), "Compute dtype: float32, bfloat16 "
                    "(stablehlo, saved_model) or float16 (tflite: float16 weights).", **define)
  flags.DEFINE_boolean("with_preprocessing", False, "saved_model: the signature takes "
                       "encoded image bytes and decodes, resizes and scales them in the "
                       "graph, as python -m vit_jax.predict does.", **define)
  flags.DEFINE_integer("max_patches", None, "NaFlex (a MAP-pooled ViT classifier, e.g. a "
                       "fine-tuned NaFlex image tower): the model takes patches, mask and grid "
                       "at this patch budget, as vit_jax.data.naflex_patches.patchify gives "
                       "them (docs/serving.md); default: the budget the checkpoint records (a "
                       "NaFlex run's params.npz), else images; 0: images.", **define)
  flags.DEFINE_boolean("overwrite", False, "Replace an existing OUT that is no earlier "
                       "export (refused by default: nothing is clobbered).", **define)
  flags.mark_flag_as_required("to", flag_values=flag_values)


if __name__ == "__main__":
  cli.run(main, define_flags)
