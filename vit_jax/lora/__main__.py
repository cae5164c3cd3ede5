"""python -m vit_jax.lora BASE ADAPTERS OUT [--overwrite]

Rebuilds a LoRA run's params.npz (merged weights, released layout, the head's class names)
from the base checkpoint it started from (a file or released name) and the run's
adapters.npz, bit for bit (see vit_jax.lora.merge).
"""

from absl import flags
from flax import traverse_util

from vit_jax import cli, errors, lora, no_clobber
from vit_jax.checkpoints import hub, npz

FLAGS = flags.FLAGS


@cli.command
def main(argv, flag_values=FLAGS):
  if len(argv) != 4:
    raise cli.UsageError("pass BASE, ADAPTERS and OUT, e.g. python -m vit_jax.lora "
                         "ViT-B_16 workdir/adapters.npz merged.npz")
  base, adapters, out = hub.resolve(argv[1]), argv[2], argv[3]
  no_clobber.claim_output_file(out, "lora", flag_values.overwrite)
  arrays = npz.read_npz(adapters)
  if lora.SETTINGS not in arrays:
    raise errors.InvalidInput(f"{adapters} holds no {lora.SETTINGS}: pass the adapters.npz "
                              "that a LoRA run (config.lora.rank >= 1) wrote")
  merged = lora.merge(npz.read_checkpoint(base).flat, arrays)
  npz.save_npz(traverse_util.unflatten_dict(merged, sep="/"), out,
               class_names=lora.class_names(arrays))
  print(f"wrote {out}: {base} with the adapters and head of {adapters}")


def define_flags(flag_values=flags.FLAGS) -> None:
  """The command's flags; not defined on import, so importers' flags stay their own."""
  flags.DEFINE_boolean("overwrite", False, no_clobber.OVERWRITE_HELP, flag_values=flag_values)


if __name__ == "__main__":
  cli.run(main, define_flags)
