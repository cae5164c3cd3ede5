"""Fetches one checkpoint: python -m vit_jax.download NAME_OR_URL [--dir=checkpoints] [--force]
                   python -m vit_jax.download --list [FAMILY]

NAME_OR_URL is a released name (`imagenet21k/ViT-B_16`, a two-tower model such as
`LiT-B16B_2` or `SigLIP2-B_16-224`: `--list two-tower` shows them, `augreg/B_16-i21k-300ep-...`, a
bare model name such as `ViT-B_16`, a gs://vit_models URL), any Hugging Face Hub ViT
(`hf-hub:google/vit-base-patch16-224`) or another URL. Released files come from their
Hugging Face Hub mirror (the bucket refuses anonymous downloads since February 2026; the
bucket is tried last), converted to DIR/FAMILY/FILE.npz with a provenance file beside it,
where --checkpoint and config.pretrained find them (see vit_jax.checkpoints.hub). Other
URLs (http(s), file, gs:// of other buckets) are copied to DIR/FILE. Only complete files
ever get the final name.
"""

import os
import sys

from absl import flags

from vit_jax.base import cli
from vit_jax.checkpoints import hub, released
from vit_jax.checkpoints.transfer import DownloadError, fetch  # noqa: F401  (API)


def download(name_or_url: str, directory: str = released.LOCAL_DIR, *, force: bool = False,
             verbose: bool = True) -> str:
  """Fetches a checkpoint into DIRECTORY (see the module docstring) unless it is there;
  returns its path. Raises InvalidInput for a name that is none, OSError for a failed fetch."""
  text = str(name_or_url)
  fetcher = hub.fetcher_of(text)
  if fetcher is not None:  # a family's own released names (a Hub folder, ...)
    return fetcher.fetch(text, directory, force=force, verbose=verbose)
  if text.startswith(hub.HUB_PREFIX):
    url, dest = text, hub.hub_local_path(hub.parse_hub_name(text), directory)
  else:
    url = released.resolve(text, local_dir=None)
    if not released.has_scheme(url):
      raise DownloadError(f"{name_or_url} is a local path, not a URL or a released name")
    dest = released.local_path(url, directory)  # InvalidInput for a URL that names no file
  if os.path.exists(dest) and not force:
    if verbose:
      print(f"{dest} is already downloaded (--force fetches it again)", file=sys.stderr)
    return dest
  if url.startswith(hub.HUB_PREFIX):
    return hub.resolve(url, directory, force=force, verbose=verbose)
  if released.is_bucket_url(url):
    return hub.fetch_released(url, dest, force=force, verbose=verbose)
  return fetch(url, dest, verbose=verbose)


@cli.command
def main(argv):
  if flags.FLAGS.list:
    if len(argv) > 2:
      raise cli.UsageError("--list takes at most one FAMILY, e.g. --list augreg")
    family = argv[1] if len(argv) == 2 else None
    print("\n".join(hub.listing(family) + (hub.fetched_listing() if family is None else [])))
    return
  if len(argv) != 2:
    raise cli.UsageError("give one NAME_OR_URL, e.g. imagenet21k/ViT-B_16 (--list shows the "
                         "released files)")
  print(download(argv[1], flags.FLAGS.dir, force=flags.FLAGS.force))


def define_flags(flag_values: flags.FlagValues = flags.FLAGS) -> None:
  """The command's flags; not defined on import, so importers' flags stay their own."""
  define = dict(flag_values=flag_values)
  flags.DEFINE_string("dir", released.LOCAL_DIR, "Root folder: released files go to "
                      "DIR/FAMILY/FILE.npz, hf-hub:ORG/NAME to DIR/hf-hub/ORG/NAME.npz, other "
                      "URLs to DIR/FILE.", **define)
  flags.DEFINE_bool("force", False, "Download again even if the file is already there.",
                    **define)
  flags.DEFINE_bool("list", False, "Print the released files that can be fetched (all, or "
                    "those of the FAMILY given as argument) and the Hugging Face Hub "
                    "repositories they come from, then exit.", **define)


if __name__ == "__main__":
  cli.run(main, define_flags)
