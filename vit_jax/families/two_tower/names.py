"""Released two-tower models by name (LiT-B16B_2, SigLIP-B_16-224, SigLIP2-So400m_14-384,
...) and how to fetch them: a Hugging Face Hub folder (config.json, model.safetensors and
the tokenizer) where Google publishes one, else the bucket file with its vocabulary.

SigLIP and SigLIP 2 come from Google's `google/siglip*` repositories (transformers'
conversions of big_vision's `.npz` files, which load_two_tower reads and save_two_tower
writes back in big_vision's layout; that they hold the very same arrays as the bucket files
is not checked here: nothing can be downloaded from this machine). LiT has no Hub copy:
its `gs://vit_models/lit/NAME.npz` and `NAME.txt` / `NAME.model` come from the bucket,
which refuses anonymous downloads since February 2026 (one line says so).
"""

import dataclasses
import os
from typing import Dict, List, Optional

from vit_jax.base import errors, storage
from vit_jax.checkpoints import hub, transfer
from vit_jax.checkpoints import released as bucket

FOLDER = "two-tower"  # DIR/two-tower/NAME (a Hub folder) or DIR/lit/NAME.npz
folder = FOLDER  # the family contract's Fetcher part: `download --list two-tower`
HUB_FILES = ("config.json", "model.safetensors")
HUB_TOKENIZERS = ("spiece.model", "tokenizer.model", "tokenizer.json")  # whichever it has


@dataclasses.dataclass(frozen=True)
class Entry:
  family: str  # lit | siglip | siglip2
  repo: Optional[str]  # Hugging Face Hub repository
  bucket: Optional[str]  # the original file
  vocabulary: Optional[str] = None  # LiT: the tokenizer file beside the bucket file


def _lit(name: str, vocabulary: str) -> Entry:
  return Entry("lit", None, f"gs://vit_models/lit/{name}.npz",
               f"gs://vit_models/lit/{name}.{vocabulary}")


_SIZES = {"B": "base", "L": "large", "So400m": "so400m", "g-opt": "giant-opt"}


def _siglip2(size: str, patch: int, res) -> Entry:
  return Entry("siglip2", f"google/siglip2-{_SIZES[size]}-patch{patch}-{res}",
               f"gs://big_vision/siglip2/siglip2_{size.lower()}{patch}_{res}.npz")


def _siglip(size: str, patch: int, res: int, bucket: str) -> Entry:
  return Entry("siglip", f"google/siglip-{_SIZES[size]}-patch{patch}-{res}",
               f"gs://big_vision/siglip/{bucket}.npz")


NAMES: Dict[str, Entry] = {
    "LiT-B16B": _lit("LiT-B16B", "txt"), "LiT-B16B_2": _lit("LiT-B16B_2", "txt"),
    "LiT-L16L": _lit("LiT-L16L", "txt"), "LiT-L16S": _lit("LiT-L16S", "model"),
    "LiT-L16Ti": _lit("LiT-L16Ti", "model"),
    "SigLIP-B_16-224": _siglip("B", 16, 224, "webli_en_b16_224_63724782"),
    "SigLIP-B_16-256": _siglip("B", 16, 256, "webli_en_b16_256_60500360"),
    "SigLIP-B_16-384": _siglip("B", 16, 384, "webli_en_b16_384_68578854"),
    "SigLIP-B_16-512": _siglip("B", 16, 512, "webli_en_b16_512_68580893"),
    "SigLIP-L_16-256": _siglip("L", 16, 256, "webli_en_l16_256_60552751"),
    "SigLIP-L_16-384": _siglip("L", 16, 384, "webli_en_l16_384_63634585"),
    "SigLIP-So400m_14-224": _siglip("So400m", 14, 224, "webli_en_so400m_224_57633886"),
    "SigLIP-So400m_14-384": _siglip("So400m", 14, 384, "webli_en_so400m_384_58765454"),
    **{f"SigLIP2-{size}_{patch}-{res}": _siglip2(size, patch, res)
       for size, patch, resolutions in (("B", 16, (224, 256, 384, 512)), ("B", 32, (256,)),
                                        ("L", 16, (256, 384, 512)), ("So400m", 14, (224, 384)),
                                        ("So400m", 16, (256, 384, 512)),
                                        ("g-opt", 16, (256, 384)))
       for res in resolutions},
    "SigLIP2-B_16-NaFlex": Entry("siglip2", "google/siglip2-base-patch16-naflex",
                                 "gs://big_vision/siglip2/siglip2_b16_naflex.npz"),
    "SigLIP2-So400m_16-NaFlex": Entry("siglip2", "google/siglip2-so400m-patch16-naflex",
                                      "gs://big_vision/siglip2/siglip2_so400m16_naflex.npz"),
}


# The two-tower image towers with a fine-tuning config of their own (configs/siglip2_*.py
# build that tower's geometry; config.pretrained picks the file, SigLIP or SigLIP 2).
TOWER_CONFIGS = {"b_16": "configs/siglip2_b16.py", "l_16": "configs/siglip2_l16.py",
                 "so400m_14": "configs/siglip2_so400m14.py"}


def as_model_name(model_name: str) -> Optional[str]:
  """The one line for a two-tower name given as config.model_name (SigLIP2-B_16, LiT-B16B,
  SigLIP-L_16-384: the zoo would call it an unknown ViT and offer ViT-B_16), or None for
  any other name."""
  name = str(model_name).strip()
  if not name.lower().startswith(("lit-", "siglip-", "siglip2-")):
    return None
  start = name if name in NAMES else next(
      (n for n in NAMES if n.lower().startswith(name.lower() + "-")), None)
  config = TOWER_CONFIGS.get(name.split("-")[1].lower())
  if config is None:
    finetune = ("its image tower has no fine-tuning config here (configs/siglip2_*.py build "
                "the B_16, L_16 and So400m_14 towers)")
  else:
    finetune = f"fine-tune its image tower as a classifier with --config={config}"
    if start:
      finetune += f" --config.pretrained={start}"
  return (f"config.model_name={name} names a two-tower (image-text) model, not an image "
          f"model's architecture: {finetune}; to classify zero-shot, python -m "
          f"vit_jax.zeroshot --checkpoint={start or 'NAME'} (python -m vit_jax.download "
          f"--list names them)")


def released() -> List[str]:
  return list(NAMES)


def spellings() -> List[str]:
  return list(NAMES)


_PREFIXES = ("lit-", "siglip-", "siglip2-")


def canonical(name: str) -> Optional[str]:
  """The released name (case ignored); a name of the family's pattern that is not released
  (SigLIP2-B_16) is still the family's, so that building it says what to do instead."""
  name = str(name).strip()
  found = next((n for n in NAMES if n.lower() == name.lower()), None)
  return found or (name if name.lower().startswith(_PREFIXES) else None)


def architecture(name: str) -> Entry:
  if name not in NAMES:
    raise errors.InvalidInput(as_model_name(name))
  return NAMES[name]


def create(name: str, *, num_classes: int, **overrides):
  """Two-tower models are made from their files (vit_jax.load_two_tower, zero-shot), not
  built by name: one line that says so."""
  del num_classes, overrides
  raise errors.InvalidInput(as_model_name(name))


def from_config(config, num_classes: int):
  del num_classes
  raise errors.InvalidInput(as_model_name(config.model_name))


def architecture_of(module) -> Dict[str, object]:
  """A TwoTower's settings: its image and text towers' attributes."""
  return {"family": module.family, "img": module.img, "txt": module.txt}


def name_of(module) -> str:
  return f"{module.family} two-tower model"


def listing() -> List[str]:
  """One line per name: where it comes from."""
  return [f"{name}  ({entry.family}; {'hf-hub:' + entry.repo if entry.repo else entry.bucket})"
          for name, entry in NAMES.items()]


def local_path(name: str, directory: str = bucket.LOCAL_DIR) -> str:
  entry = NAMES[name]
  if entry.repo:
    return os.path.join(directory, FOLDER, name)
  return os.path.join(directory, "lit", name + ".npz")


def _fetch_hub(entry: Entry, dest: str, *, force: bool, verbose: bool) -> str:
  files = {name: hub.download_file(entry.repo, name, force=force, verbose=verbose)["path"]
           for name in HUB_FILES}
  for name in HUB_TOKENIZERS:
    try:
      files[name] = hub.download_file(entry.repo, name, force=force, verbose=verbose)["path"]
    except hub.MissingFile:
      continue
  os.makedirs(dest, exist_ok=True)
  for name, path in files.items():
    storage.write_atomic(os.path.join(dest, name), storage.read_bytes(path))
  return dest


def fetch(name: str, directory: str = bucket.LOCAL_DIR, *, force: bool = False,
          verbose: bool = True) -> str:
  """The local path of released model `name` (a Hub folder or an .npz with its vocabulary),
  fetched unless it is there."""
  if name not in NAMES:
    raise errors.InvalidInput(f"{name} is no released two-tower model; python -m "
                              "vit_jax.download --list shows them")
  entry, dest = NAMES[name], local_path(name, directory)
  if os.path.exists(dest) and not force:
    return dest
  if entry.repo:
    return _fetch_hub(entry, dest, force=force, verbose=verbose)
  vocabulary = os.path.splitext(dest)[0] + os.path.splitext(entry.vocabulary)[1]
  transfer.fetch(bucket.https_url(entry.vocabulary), vocabulary, verbose=verbose)
  return transfer.fetch(bucket.https_url(entry.bucket), dest, verbose=verbose)


def holds(name: str) -> bool:
  return name in NAMES
