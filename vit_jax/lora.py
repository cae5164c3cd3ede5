"""python -m vit_jax.lora BASE ADAPTERS OUT [--overwrite] [--allow_other_base]

Rebuilds a LoRA run's params.npz (merged weights, released layout, the head's class names
and NaFlex budget)
from the base checkpoint it started from (a file or released name) and the run's
adapters.npz, bit for bit (see vit_jax.training.lora_adapters.merge). adapters.npz records a sha256
of the base arrays it was trained on: another base of the same shapes is refused unless
--allow_other_base.
"""

from absl import flags
from flax import traverse_util

from vit_jax.base import cli, errors, no_clobber
from vit_jax.base.console import log
from vit_jax.checkpoints import hub, npz, npz_archive
from vit_jax.families.vit import npz_file as vit_npz_file
from vit_jax.training import lora_adapters

FLAGS = flags.FLAGS


@cli.command
def main(argv, flag_values=FLAGS):
  if len(argv) != 4:
    raise cli.UsageError("pass BASE, ADAPTERS and OUT, e.g. python -m vit_jax.lora "
                         "ViT-B_16 workdir/adapters.npz merged.npz")
  base, adapters, out = hub.resolve(argv[1]), argv[2], argv[3]
  no_clobber.claim_output_file(out, "lora", flag_values.overwrite)
  arrays = npz_archive.read_npz(adapters)
  if lora_adapters.SETTINGS not in arrays:
    raise errors.InvalidInput(f"{adapters} holds no {lora_adapters.SETTINGS}: pass the "
                              "adapters.npz that a LoRA run (config.lora.rank >= 1) wrote")
  base_arrays = vit_npz_file.read_checkpoint(base).flat
  matches = lora_adapters.base_matches(base_arrays, arrays)
  if matches is None:
    log.warning("%s records no identity of its base (written before one was kept): %s "
                "is not checked to be the checkpoint the run started from", adapters, base)
  elif not matches and not flag_values.allow_other_base:
    raise errors.InvalidInput(
        f"{adapters} were trained from another base than {base} (its frozen arrays "
        "differ): pass the checkpoint the run started from (its config.json's pretrained), "
        "or --allow_other_base to merge onto this one anyway")
  merged = lora_adapters.merge(base_arrays, arrays)
  npz.save_npz(traverse_util.unflatten_dict(merged, sep="/"), out,
               class_names=lora_adapters.class_names(arrays),
               max_patches=lora_adapters.max_patches(arrays))
  print(f"wrote {out}: {base} with the adapters and head of {adapters}")


def define_flags(flag_values=flags.FLAGS) -> None:
  """The command's flags; not defined on import, so importers' flags stay their own."""
  flags.DEFINE_boolean("overwrite", False, no_clobber.OVERWRITE_HELP, flag_values=flag_values)
  flags.DEFINE_boolean("allow_other_base", False, "merge onto a BASE whose arrays differ from "
                       "those the adapters were trained on (same shapes): another model",
                       flag_values=flag_values)


if __name__ == "__main__":
  cli.run(main, define_flags)
