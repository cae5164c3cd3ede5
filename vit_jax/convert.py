"""python -m vit_jax.convert SRC DST [--to=timm|hf|npz] [--model=NAME] [--image_size=PX]
    [--patch_size=PX] [--pre_logits=drop|pooler] [--overwrite]

Converts a checkpoint between our released .npz layout, timm and Hugging Face transformers
(see vit_jax.checkpoints.format_conversion): SRC is anything load_npz reads (a released,
big_vision or params.npz file, a timm / HF .safetensors, .pth or .bin file, or a model
folder), a released name (ViT-B_16, FAMILY/NAME) or a Hub ViT (hf-hub:ORG/NAME), fetched
into checkpoints/ first (see vit_jax.checkpoints.hub). Each model family converts to the
targets its converter writes (docs/interop.md); the target follows DST's name (.npz: npz,
.safetensors: timm, a folder: the family's default) unless --to says it. Prints what
it read and wrote and the call that loads the result. DST must be new (or an earlier
conversion's output): anything else is refused unless --overwrite.
"""

from absl import flags

from vit_jax.base import cli, no_clobber
from vit_jax.checkpoints import format_conversion, hub

FLAGS = flags.FLAGS


@cli.command
def main(argv, flag_values=FLAGS):
  if len(argv) != 3:
    raise cli.UsageError("pass SRC and DST, e.g. python -m vit_jax.convert params.npz "
                         "out/ --to=hf")
  src = hub.resolve(argv[1])
  lines = format_conversion.convert(src, argv[2], to=flag_values.to,
                                   model_name=flag_values.model,
                                   pre_logits=flag_values.pre_logits,
                                   image_size=flag_values.image_size,
                                   patch_size=flag_values.patch_size,
                                   overwrite=flag_values.overwrite)
  print("\n".join(lines))


def define_flags(flag_values=flags.FLAGS) -> None:
  """The command's flags; not defined on import, so importers' flags stay their own."""
  define = dict(flag_values=flag_values)
  flags.DEFINE_enum("to", None, list(format_conversion.TARGETS),
                    "Target format: npz (released layout), timm (folder for "
                    "timm.create_model('local-dir:DST'), or one .safetensors file), hf "
                    "(transformers ViT folder). Default: from DST's name.", **define)
  flags.DEFINE_string("model", None, "Released model name (ViT-B_16, R50+ViT-B_16, ...) that "
                      "SRC must be; default: inferred from its shapes.", **define)
  flags.DEFINE_integer("image_size", None, "Input side of the written model: the position "
                       "embedding is resized (or, for sincos2d, computed) for it. Default: "
                       "SRC's (224 for sincos2d).", lower_bound=1, **define)
  flags.DEFINE_integer("patch_size", None, "Patch size of the written model (plain ViTs): the "
                       "patch-embedding kernel is PI-resized (FlexiViT) and the position "
                       "embedding goes to the new grid at the same image size. Default: SRC's.",
                       lower_bound=1, **define)
  flags.DEFINE_enum("pre_logits", None, list(format_conversion.PRE_LOGITS),
                    "For a SRC with a pre_logits layer, which timm and ViTForImageClassification "
                    "lack: drop (it and the "
                    "head: a feature extractor) or pooler (hf only: ViTModel's pooler is that "
                    "layer). Default: refuse.", **define)
  flags.DEFINE_boolean("overwrite", False, no_clobber.OVERWRITE_HELP, **define)


if __name__ == "__main__":
  cli.run(main, define_flags)
