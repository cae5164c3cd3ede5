"""Released checkpoints from the Hugging Face Hub, kept as the released .npz files.

gs://vit_models refuses anonymous downloads since February 2026; the same weights are on
the Hub (timm's `timm/<architecture>.<tag>` and Google's `google/vit-*` repositories, see
hub_mirrors.json and vit_jax.checkpoints.hub_table). `resolve` turns anything a user types
into a local path, in this order:
  1. a complete local copy: DIR/FAMILY/FILE.npz (DIR: `checkpoints`, or --dir);
  2. the file's Hub mirrors, in the table's order (the next one on a missing repository
     or file; the weights from model.safetensors, else flax_model.msgpack, else
     pytorch_model.bin where PyTorch is installed), fetched with huggingface_hub (its
     cache, resumed downloads, HF_ENDPOINT, HF_HUB_OFFLINE, HF_TOKEN, progress bars),
     checked against the Hub's sha256, converted into the released layout by
     vit_jax.checkpoints.formats and written atomically to DIR/FAMILY/FILE.npz with
     DIR/FAMILY/FILE.provenance.json beside it;
  3. the bucket itself, read anonymously over HTTPS (vit_jax.checkpoints.transfer; no
     credentials are used), which names the closure when it answers 403.
`hf-hub:ORG/NAME` names any Hub ViT (kept as DIR/hf-hub/ORG/NAME.npz); architectures that
vit_jax does not compute exactly are refused, naming what they are.
"""

import dataclasses
import datetime
import hashlib
import io
import json
import os
import re
import sys
from typing import Any, Dict, List, Optional, Tuple

import numpy as np
from flax import traverse_util

from vit_jax.base import console, errors, storage
from vit_jax.checkpoints import formats, hub_table, npz, released, transfer
from vit_jax.models import family_registry

HUB_PREFIX = "hf-hub:"
HUB_DIR = "hf-hub"  # DIR/hf-hub/ORG/NAME.npz for hf-hub: names
PROVENANCE_SUFFIX = ".provenance.json"
# In this order: four of Google's repositories have no safetensors but transformers' Flax
# file, read without PyTorch; the .bin only where torch imports.
WEIGHTS = ("model.safetensors", formats.FLAX_MSGPACK, "pytorch_model.bin")
CONVERTED = ("renamed and reshaped into the released .npz layout by "
             "vit_jax.checkpoints.formats; values unchanged (float32)")
_SHA256 = re.compile(r"[0-9a-f]{64}")
# The --checkpoint help of predict, fewshot, visualize and vtab.
CHECKPOINT_HELP = ("A .npz / timm / Hugging Face file or folder, a gs:// URL, a released name "
                   "(ViT-B_16, FAMILY/NAME; fetched from its Hugging Face Hub mirror into "
                   "checkpoints/ on first use) or any Hub ViT as hf-hub:ORG/NAME.")


class HubError(errors.UserError, OSError, ValueError):
  """A Hub fetch that failed, or a Hub model vit_jax refuses; one line naming the
  repository and the cause."""


class MissingFile(HubError):
  """The repository exists but lacks the file (the next weights file or mirror may do)."""


@dataclasses.dataclass(frozen=True)
class Mirror:
  repo: str
  layout: str  # 'timm' or 'hf'
  differs: str  # what the copy lacks compared with the bucket file


_TABLE: Dict[str, Any] = {}


def table() -> Dict[str, Any]:
  if not _TABLE:
    _TABLE.update(hub_table.load())
  return _TABLE


def mirrors_of(path: str) -> List[Mirror]:
  """The Hub copies of bucket file FAMILY/FILE.npz, in the order to try them."""
  return [Mirror(**row) for row in table()["mirrors"].get(path, [])]


def mirrored_repos() -> Dict[str, str]:
  """{repository: the bucket file it copies}."""
  return {row["repo"]: path for path, rows in table()["mirrors"].items() for row in rows}


def _model_of(path: str) -> str:
  """`imagenet21k/ViT-B_16.npz` and `augreg/B_16-i21k-...npz` -> `B_16`."""
  name = path.split("/")[-1].replace("ViT-", "").replace("+", "_")
  return re.split(r"[-.]", name, maxsplit=1)[0]


def nearest(path: str, count: int = 3) -> List[str]:
  """Mirrored files of the same model (else of the same family) as bucket file `path`."""
  paths = list(table()["mirrors"])
  same_model = [p for p in paths if _model_of(p) == _model_of(path)]
  return (same_model or [p for p in paths if p.startswith(path.split("/")[0] + "/")])[:count]


def listing(family: Optional[str] = None) -> List[str]:
  """`FAMILY/FILE <- repo (what differs)` for every fetchable file (of one folder); for a
  folder a model family fetches itself (its Fetcher's), that family's names."""
  fetchers = [f.fetcher for f in family_registry.families() if f.fetcher is not None]
  if family is not None and family not in released.folders():
    for fetcher in fetchers:
      if fetcher.folder == family:
        return fetcher.listing()
    raise errors.InvalidInput(f"unknown checkpoint family {family!r}; families: "
                              f"{', '.join([*released.folders(), *(f.folder for f in fetchers)])}")
  lines = []
  for path, rows in table()["mirrors"].items():
    if family is None or path.startswith(family + "/"):
      sources = ", ".join(r["repo"] + ("" if r["differs"] == hub_table.SAME
                                       else f" ({r['differs']})") for r in rows)
      lines.append(f"{path[:-len('.npz')]}  <- {sources}")
  for model_family in family_registry.families():
    bucket = model_family.bucket
    for folder, names in (bucket.listed.items() if bucket is not None else ()):
      if family in (None, folder):
        lines += [f"{folder}/{name}  <- {bucket.url} only (no Hub mirror)"
                  for name in names if f"{folder}/{name}.npz" not in table()["mirrors"]]
  if any("no head" in line for line in lines):
    lines.append(f"({hub_table.LEGEND})")
  return lines


def fetched_listing() -> List[str]:
  """The released names the model families fetch themselves, one line each."""
  return [line for family in family_registry.families() if family.fetcher is not None
          for line in family.fetcher.listing()]


def _hub_error_text(error: BaseException, repo: str) -> str:
  """One line for huggingface_hub's exceptions, by kind."""
  from huggingface_hub import errors as hf_errors  # pylint: disable=import-outside-toplevel
  if isinstance(error, hf_errors.GatedRepoError):
    return f"{repo} is gated: accept its terms on the Hub and set HF_TOKEN"
  if isinstance(error, hf_errors.RepositoryNotFoundError):
    return f"no repository {repo} on the Hub (or it is private: set HF_TOKEN)"
  if isinstance(error, hf_errors.RevisionNotFoundError):
    return f"{repo} has no such revision"
  if isinstance(error, hf_errors.LocalEntryNotFoundError):
    if offline():
      return f"HF_HUB_OFFLINE is set and the Hub cache holds no copy of {repo}"
    return (f"cannot reach the Hub at {endpoint()} for {repo}, and its cache holds "
            "no copy (no network? check HF_ENDPOINT and your proxy)")
  return f"{repo}: {transfer.one_line(error)}"


def endpoint() -> str:
  """The Hub's address: $HF_ENDPOINT as it is now (huggingface_hub reads it once, at import)."""
  from huggingface_hub import constants  # pylint: disable=import-outside-toplevel
  return (os.environ.get("HF_ENDPOINT") or constants.ENDPOINT).rstrip("/")


def _sha256(path: str) -> str:
  digest = hashlib.sha256()
  with storage.open_read(path) as f:
    while chunk := f.read(transfer.CHUNK_BYTES):
      digest.update(chunk)
  return digest.hexdigest()


def _reachable(repo: str, filename: str) -> bool:
  """One HEAD without huggingface_hub's retries (which wait ~25 s on a dead network):
  False when the Hub cannot be reached; the Hub's own answers (404, 401, ...) raise."""
  import huggingface_hub  # pylint: disable=import-outside-toplevel  # seconds to import
  url = huggingface_hub.hf_hub_url(repo, filename, endpoint=endpoint())
  try:
    huggingface_hub.get_hf_file_metadata(url, retry_on_errors=False)
  except huggingface_hub.errors.HfHubHTTPError:
    raise
  except Exception:  # pylint: disable=broad-except  # httpx's connection errors and timeouts
    return False
  return True


def _download(repo: str, filename: str, *, force: bool, verbose: bool) -> Dict[str, Any]:
  """One file of `repo` through huggingface_hub's cache, checked against the Hub's sha256
  (the ETag of large files); a mismatch removes the cached copy and raises. Without a
  network (or with HF_HUB_OFFLINE) only the cache is read."""
  import huggingface_hub  # pylint: disable=import-outside-toplevel  # seconds to import
  from huggingface_hub.utils import disable_progress_bars  # pylint: disable=import-outside-toplevel
  try:
    cache_only = offline() or not _reachable(repo, filename)
    kwargs = dict(force_download=force and not cache_only, endpoint=endpoint(),
                  local_files_only=cache_only)
    if verbose:
      path = huggingface_hub.hf_hub_download(repo, filename, **kwargs)
    else:
      with disable_progress_bars():
        path = huggingface_hub.hf_hub_download(repo, filename, **kwargs)
  except huggingface_hub.errors.RemoteEntryNotFoundError:
    raise MissingFile(f"{repo} has no file {filename}") from None
  except (huggingface_hub.errors.HfHubHTTPError, huggingface_hub.errors.EntryNotFoundError,
          OSError, ValueError) as e:
    raise HubError(_hub_error_text(e, repo)) from None
  except Exception as e:  # pylint: disable=broad-except  # httpx's errors on a dropped link
    raise HubError(f"download of {filename} from {repo} failed: {type(e).__name__}: "
                   f"{transfer.one_line(e)}") from None
  sha = _sha256(path)
  blob = os.path.realpath(path)
  etag = os.path.basename(blob)
  if _SHA256.fullmatch(etag) and etag != sha:
    for stale in (path, blob):
      if os.path.lexists(stale):
        os.unlink(stale)
    raise HubError(f"{filename} from {repo} does not match the Hub's sha256 (altered or "
                   "corrupted on the way): nothing was kept; run again")
  return {"path": path, "sha256": sha, "bytes": os.path.getsize(path),
          "revision": os.path.basename(os.path.dirname(path))}


def download_file(repo: str, filename: str, *, force: bool = False,
                  verbose: bool = True) -> Dict[str, Any]:
  """One file of a Hub repository (any model, e.g. a two-tower folder's), checked as
  _download checks it: {path, sha256, bytes, revision}; MissingFile if it has none."""
  return _download(repo, filename, force=force, verbose=verbose)


def _mirror_parts() -> list:
  """The families' HubMirrors parts, the default family's first."""
  return [family.hub_mirrors for family in reversed(family_registry.families())
          if family.hub_mirrors is not None]


def _check_architecture(config: Dict[str, Any], repo: str, original: bool) -> None:
  """Refuses what vit_jax cannot compute exactly; warns (not for the bucket's own weights,
  trained with the tanh GELU vit_jax computes) about the activation of other timm/HF ViTs."""
  if "architecture" in config:  # timm
    arch = config["architecture"]
    known = table()["timm_architectures"].get(arch)
    if known is None:
      parts = _mirror_parts()
      raise HubError(f"{repo} is a timm {arch}, not one of timm's "
                     f"{' or '.join(p.timm_models for p in parts)} models that vit_jax "
                     f"computes (hf-hub: takes {' and '.join(p.timm_scope for p in parts)})")
    args = config.get("model_args") or {}
    mirrors = next((part for part in _mirror_parts()
                    if part.owns_timm_architecture(arch)), None)
    other = sorted(set(args) - set(mirrors.computed_args if mirrors else ()))
    reasons = [r for r in [known["refused"], *(f"{k}={args[k]}" for k in other)] if r]
    if reasons:
      raise HubError(f"{repo} is a timm {arch} with {', '.join(reasons)}: vit_jax cannot "
                     "compute that model exactly, so it is refused")
    act = args.get("act_layer", known["act_layer"])
    if act not in hub_table.ACTIVATIONS:
      raise HubError(f"{repo} is a timm {arch} with act_layer={act}: vit_jax computes the "
                     "tanh GELU only, so it is refused")
    note = None if original or mirrors is None else mirrors.gelu_note(act)
    if note:
      console.log.warning("%s: %s", repo, note)
  elif "model_type" in config:  # transformers
    try:
      notes = next((found for part in _mirror_parts()
                    for found in [part.transformers_notes(config)] if found is not None), None)
    except errors.InvalidInput as e:
      raise HubError(f"{repo}: {e}") from None
    if notes is None:
      raise HubError(f"{repo}: model_type {config['model_type']!r} is not a transformers "
                     "model vit_jax reads (hf-hub: takes plain ViTs, model_type 'vit')")
    for note in [] if original else notes:
      console.log.warning("%s: %s", repo, note)
  else:
    raise HubError(f"{repo} holds no timm or transformers model config (config.json names "
                   "neither an architecture nor a model_type): not a ViT this reads")


def _read_config(path: str, repo: str) -> Dict[str, Any]:
  try:
    return formats.read_config(path)
  except formats.FormatError as e:
    raise HubError(f"{repo}: {e}") from None


def _weights(repo: str, *, force: bool, verbose: bool) -> Dict[str, Any]:
  import importlib.util  # pylint: disable=import-outside-toplevel
  tried = []
  for filename in WEIGHTS:
    if filename.endswith(".bin") and importlib.util.find_spec("torch") is None:
      tried.append(f"{filename} needs PyTorch (pip install torch)")
      continue
    try:
      return {"name": filename, **_download(repo, filename, force=force, verbose=verbose)}
    except MissingFile as e:
      tried.append(str(e))
  raise HubError(f"{repo} has no weights vit_jax reads: {'; '.join(tried)}")


def fetch_repo(repo: str, dest: str, *, original: bool, differs: Optional[str] = None,
               bucket_file: Optional[str] = None, force: bool = False,
               verbose: bool = True) -> str:
  """Hub repository -> released-layout DEST.npz (atomic) with its provenance file."""
  config_file = _download(repo, formats.CONFIG, force=force, verbose=False)
  config = _read_config(config_file["path"], repo)
  _check_architecture(config, repo, original)
  weights = _weights(repo, force=force, verbose=verbose)
  try:
    read = formats.read_foreign(os.path.dirname(weights["path"]), notes=False)
    flat = family_registry.for_arrays(read).released_file.to_arrays(
        traverse_util.unflatten_dict(read, sep="/"))
  except formats.FormatError as e:
    raise HubError(f"{repo} {transfer.one_line(e)}") from None
  provenance = {
      "repository": repo, "revision": weights["revision"], "bucket_file": bucket_file,
      "files": {name: {"sha256": f["sha256"], "bytes": f["bytes"]}
                for name, f in ((formats.CONFIG, config_file), (weights["name"], weights))},
      "layout": "timm" if "architecture" in config else "transformers",
      "converted": CONVERTED, "differs_from_bucket_file": differs,
      "arrays": len(flat),
      "written": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
  }
  arrays = io.BytesIO()
  np.savez(arrays, **flat)
  storage.write_atomic(provenance_path(dest), json.dumps(provenance, indent=1) + "\n")
  storage.write_atomic(dest, arrays.getvalue())  # last: a complete .npz has its provenance
  if verbose:
    print(f"{repo} -> {dest}", file=sys.stderr)
  return dest


def provenance_path(npz_path: str) -> str:
  return npz_path[:-len(".npz")] + PROVENANCE_SUFFIX


def offline() -> bool:
  """$HF_HUB_OFFLINE as it is now (huggingface_hub reads it once, at import)."""
  from huggingface_hub import constants  # pylint: disable=import-outside-toplevel
  flag = os.environ.get("HF_HUB_OFFLINE", "").upper() in ("1", "ON", "YES", "TRUE")
  return flag or constants.is_offline_mode()


def fetch_released(url: str, dest: str, *, force: bool = False, verbose: bool = True) -> str:
  """Bucket file `url` into DEST: from its mirrors in order, else from the bucket."""
  path = released.bucket_path(url)
  failures = []
  for mirror in mirrors_of(path):
    try:
      return fetch_repo(mirror.repo, dest, original=True, differs=mirror.differs,
                        bucket_file=path, force=force, verbose=verbose)
    except HubError as e:
      failures.append(f"Hub mirror {mirror.repo}: {e}")
  if not mirrors_of(path):
    near = nearest(path)
    failures.append(f"no Hub mirror of {path} is known" + (
        f" (mirrored: {', '.join(near)})" if near else ""))
  if offline():
    raise HubError(f"cannot fetch {path}: {'; '.join(failures)}; HF_HUB_OFFLINE is set, so "
                   f"the bucket was not tried")
  try:
    transfer.fetch(url, dest, verbose=verbose)
  except transfer.DownloadError as e:
    raise HubError(f"cannot fetch {path}: {'; '.join(failures + [str(e)])}") from None
  return dest


def parse_hub_name(name: str) -> str:
  """`hf-hub:ORG/NAME` -> `ORG/NAME`, or InvalidInput."""
  repo = name[len(HUB_PREFIX):]
  parts = repo.split("/")
  if len(parts) != 2 or not all(released.is_file_name(p) for p in parts):
    raise errors.InvalidInput(f"{name!r} is no Hub repository name: write hf-hub:ORG/NAME, "
                              "e.g. hf-hub:google/vit-base-patch16-224")
  return repo


def hub_local_path(repo: str, directory: str) -> str:
  return os.path.join(directory, HUB_DIR, *repo.split("/")[:-1], repo.split("/")[-1] + ".npz")


def fetcher_of(name: str):
  """The Fetcher of the family whose released name `name` is (one it fetches itself), or
  None; a path of that name on disk is a path."""
  if os.path.exists(name):
    return None
  return next((family.fetcher for family in family_registry.families()
               if family.fetcher is not None and family.fetcher.holds(name)), None)


def resolve(name_or_url: str, local_dir: str = released.LOCAL_DIR, *, force: bool = False,
            verbose: bool = True) -> str:
  """A local path (or a non-HTTP URL such as gs://my-bucket/x.npz) for anything a user
  may type: released names and URLs, hf-hub: names, paths. Fetches what is missing."""
  text = str(name_or_url)
  fetcher = fetcher_of(text)
  if fetcher is not None:
    return fetcher.fetch(text, local_dir, force=force, verbose=verbose)
  if text.startswith(HUB_PREFIX):
    repo = parse_hub_name(text)
    dest = hub_local_path(repo, local_dir)
    if os.path.exists(dest) and not force:
      return dest
    origin = mirrored_repos().get(repo)
    return fetch_repo(repo, dest, original=origin is not None, bucket_file=origin,
                      differs=next((m.differs for m in mirrors_of(origin or "")
                                    if m.repo == repo), None), force=force, verbose=verbose)
  target = released.resolve(text, local_dir=None)
  if released.is_bucket_url(target):
    dest = released.local_path(target, local_dir)
    if os.path.exists(dest) and not force:
      return dest
    return fetch_released(target, dest, force=force, verbose=verbose)
  if target.startswith(("http://", "https://")):
    raise errors.InvalidInput(f"{text} is not read directly: fetch it first with python -m "
                              f"vit_jax.download {text} --dir={local_dir}, then pass the "
                              "path it prints")
  return target


def load_for_inference(checkpoint: str, image_size: Optional[npz.ImageSize] = None, *,
                       allow_nonfinite: bool = False
                       ) -> Tuple[Any, Dict[str, Any], Tuple[int, int]]:
  """(module, params, (height, width)) for the predict, visualize, fewshot and export
  commands.

  checkpoint is anything resolve accepts (released names and hf-hub: names are
  fetched into checkpoints/ first). The params keep the file's grid: at another
  image_size (a side or (height, width), each a multiple of the model's stride: a command
  has no reason to drop pixels) the model resizes its position embedding in the forward
  pass, as npz.load_npz(image_size=) would (the same bits). None means the checkpoint's own.
  """
  path = resolve(checkpoint)
  module, params = npz.load_npz(path, allow_nonfinite=allow_nonfinite)
  if not family_registry.geometry(module).resizes_in_forward:  # loading resizes: reload
    native = npz.side_pair(npz.native_image_size(module, params))
    if image_size is None or npz.side_pair(image_size) == native:
      return module, params, native
    module, params = npz.load_npz(path, image_size=image_size, strict_image_size=True,
                                  allow_nonfinite=allow_nonfinite)
    return module, params, npz.side_pair(image_size)  # (native_image_size: squares only)
  if image_size is None:
    return module, params, npz.side_pair(npz.native_image_size(module, params))
  npz.check_image_size(module, image_size, strict=True)
  return module, params, npz.side_pair(image_size)
