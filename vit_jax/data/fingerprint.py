"""What a split holds, recorded so that a resumed run can tell that its data changed.

The class list alone cannot: two class folders swapped between runs keep it identical, and
the run would go on with swapped labels. Per split kind:
  * image files: each file's `class/name` and size (labels follow the class folders), so
    a change is told as files added, removed, replaced or relabelled (moved to another
    class folder, known by the same name and size); files replaced in place keep their
    labels (that is how a corrupt image is fixed);
  * TFDS: name, version, split and example count;
  * examples in memory (the digits, VTAB's selections): a sha256 of pixels and labels.
"""

import hashlib
import json
import os
from typing import Any, Dict, List, Tuple

import numpy as np

from vit_jax.data.splits import IndexedSplit, StreamingSplit

_SHOWN = 2  # example files named per kind of change


def _digest(value: Any) -> str:
  return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()


def _files(split: IndexedSplit) -> Dict[str, int]:
  """{class/name: size} of an image-folder split (paths are ROOT/SPLIT/CLASS/NAME)."""
  found = {}
  for path in split.data:
    path = os.fsdecode(path)
    found[os.path.join(*path.split(os.sep)[-2:])] = os.path.getsize(path)
  return found


def _arrays_digest(split: IndexedSplit) -> str:
  digest = hashlib.sha256(np.ascontiguousarray(split.labels).tobytes())
  if split.data.dtype == object:
    for item in split.data:
      digest.update(bytes(item))
  else:
    digest.update(np.ascontiguousarray(split.data).tobytes())
  return digest.hexdigest()


def of_split(split) -> Dict[str, Any]:
  """The split's fingerprint (see the module docstring), JSON-ready; a split read from
  ArrayRecord shards carries the fingerprint of the data they were written from."""
  if getattr(split, "fingerprint", None) is not None:
    return split.fingerprint
  if isinstance(split, StreamingSplit):
    identity = tfds_identity(split.builder, split.split)
  else:
    identity = split.tfds_identity
  if identity is not None:
    return of_tfds(identity, len(split))
  if split.kind == "files":
    files = _files(split)
    return {"kind": "files", "examples": len(split), "sha256": _digest(files), "files": files}
  return {"kind": split.kind, "examples": len(split), "sha256": _arrays_digest(split)}


def of_tfds(identity: Dict[str, str], examples: int) -> Dict[str, Any]:
  """The fingerprint of a TFDS split (tfds_identity) of `examples` examples."""
  identity = {"kind": "tfds", **identity, "examples": examples}
  return {**identity, "sha256": _digest(identity)}


def tfds_identity(builder, split: str) -> Dict[str, str]:
  return {"name": builder.name, "version": str(builder.version), "split": split}


def _shown(paths: List[str]) -> str:
  more = f", +{len(paths) - _SHOWN} more" if len(paths) > _SHOWN else ""
  return f" ({', '.join(sorted(paths)[:_SHOWN])}{more})" if paths else ""


def files_change(old: Dict[str, int], new: Dict[str, int]) -> Dict[str, List[str]]:
  """{kind: files} for the kinds relabelled (moved to another class folder, known by the
  same name and size), added, removed and replaced (same path and class, other size)."""
  gone = {path for path in old if new.get(path) != old[path]}
  came = {path for path in new if old.get(path) != new[path]}
  by_name_and_size: Dict[Tuple[str, int], List[str]] = {}
  for path in sorted(gone):
    by_name_and_size.setdefault((os.path.basename(path), old[path]), []).append(path)
  relabelled = []
  for path in sorted(came):
    folder, name = os.path.split(path)
    sources = [p for p in by_name_and_size.get((name, new[path]), [])
               if os.path.dirname(p) != folder and p in gone]
    if sources:
      gone.discard(sources[0])
      came.discard(path)
      relabelled.append(f"{sources[0]} -> {folder}/")
  return {"relabelled": relabelled, "added": sorted(came - gone),
          "removed": sorted(gone - came), "replaced": sorted(came & gone)}


def describe_files_change(old: Dict[str, int], new: Dict[str, int]) -> str:
  """'N relabelled (...), N added (...), ...' (see files_change), kinds without files left
  out."""
  return ", ".join(f"{len(paths)} {kind}{_shown(paths)}"
                   for kind, paths in files_change(old, new).items() if paths)


def labels_kept(old: Dict[str, Any], new: Dict[str, Any]) -> bool:
  """Whether every example the run saw keeps its label and no example came or went: only
  files replaced in place (what fixing a corrupt image does)."""
  if not old.get("kind") == new.get("kind") == "files" or "files" not in old:
    return False
  change = files_change(old["files"], new["files"])
  return not (change["relabelled"] or change["added"] or change["removed"])


def describe_change(old: Dict[str, Any], new: Dict[str, Any]) -> str:
  """What differs between two fingerprints of one split, on one line."""
  if old.get("kind") == new.get("kind") == "files" and "files" in old:
    return f"files {describe_files_change(old['files'], new['files'])}"
  keys = [k for k in ("kind", "name", "version", "split", "examples") if old.get(k) != new.get(k)]
  if not keys:
    return "its examples differ (as many as before)"
  return ", ".join(f"{k} {old.get(k)} -> {new.get(k)}" for k in keys)
