"""What a split holds, recorded so that a resumed run can tell that its data changed.

The class list alone cannot: two class folders swapped between runs keep it identical, and
the run would go on with swapped labels. Per split kind:
  * image files: each file's `class/name`, size and modification time in nanoseconds
    (labels follow the class folders), so a change is told as files added, removed,
    replaced or relabelled (moved to another class folder, known by the same name, size and
    time: a move keeps them); files replaced in place keep their labels (that is how a
    corrupt image is fixed); multi-label files add each file's labels (from labels.csv),
    so labels exchanged in that file count as relabelled. No image is read: content
    rewritten with its size and time restored (cp -p, rsync -t, tar) goes unseen (see
    docs/fingerprint.md);
  * TFDS: name, version, split and example count;
  * examples in memory (the digits, VTAB's selections): a sha256 of pixels and labels.
A split with captions (a captions file, class names made captions by templates) adds a
sha256 of every example's captions: a caption edited, added or moved to another image
is a data change, as are templates changed.
A NaFlex run's patch budget (config.pp.max_patches) is part of every split's fingerprint:
the same files read at another budget are other inputs, so a resume at another budget is a
data change (refused unless allowed, and recorded).
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


def _key(path: bytes) -> str:
  """`class/name` of ROOT/SPLIT/CLASS/NAME."""
  return os.path.join(*os.fsdecode(path).split(os.sep)[-2:])


def _files(split: IndexedSplit) -> Dict[str, List[int]]:
  """{class/name: [size, mtime_ns]} of an image-folder split (one stat per file)."""
  found = {}
  for path in split.data:
    stat = os.stat(path)
    found[_key(path)] = [stat.st_size, stat.st_mtime_ns]
  return found


def _multi_labels(split: IndexedSplit) -> Dict[str, str]:
  """{class/name: 'i;j'} the positive classes of each file of a multi-label split."""
  return {_key(path): ";".join(map(str, np.flatnonzero(row)))
          for path, row in zip(split.data, split.labels)}


def _arrays_digest(split: IndexedSplit) -> str:
  digest = hashlib.sha256(np.ascontiguousarray(split.labels).tobytes())
  if split.data.dtype == object:
    for item in split.data:
      digest.update(bytes(item))
  else:
    digest.update(np.ascontiguousarray(split.data).tobytes())
  return digest.hexdigest()


def captions_digest(captions) -> str:
  """sha256 of a split's captions: their own digest() where they have one, else of every
  example's captions read by index."""
  digest = getattr(captions, "digest", None)
  if digest is not None:
    return digest()
  return _digest([captions.of(index) for index in range(len(captions))])


def of_split(split) -> Dict[str, Any]:
  """The split's fingerprint (see the module docstring), JSON-ready; a split read from
  ArrayRecord shards carries the fingerprint of the data they were written from (with
  their captions', where it has them)."""
  found = _of_examples(split)
  captions = getattr(split, "captions", None)
  if captions is None or "captions" in found:
    return found
  return {**found, "captions": captions_digest(captions)}


def _of_examples(split) -> Dict[str, Any]:
  if getattr(split, "fingerprint", None) is not None:
    return split.fingerprint
  if isinstance(split, StreamingSplit):
    identity = tfds_identity(split.builder, split.split)
  else:
    identity = split.tfds_identity
  if identity is not None:
    return of_tfds(identity, len(split))
  if split.kind == "files":
    found = {"files": _files(split)}
    if split.multi_label:
      found["labels"] = _multi_labels(split)
    return {"kind": "files", "examples": len(split), "sha256": _digest(found), **found}
  return {"kind": split.kind, "examples": len(split), "sha256": _arrays_digest(split)}


def with_budget(found: Dict[str, Any], max_patches) -> Dict[str, Any]:
  """A split's fingerprint with the NaFlex patch budget it is read at (none recorded
  without one, so records of square-crop runs stay as they were)."""
  return found if max_patches is None else {**found, "max_patches": max_patches}


def _setting_change(old: Dict[str, Any], new: Dict[str, Any]) -> str:
  """What differs beside the examples: 'max_patches A -> B' (the NaFlex budgets) and
  'captions changed' (or added, removed); '' when neither."""
  parts = []
  before, after = old.get("max_patches"), new.get("max_patches")
  if before != after:
    parts.append(f"max_patches {before} -> {after}")
  before, after = old.get("captions"), new.get("captions")
  if before != after:
    parts.append("captions " + ("changed" if before and after else
                                "added" if after else "removed"))
  return "; ".join(parts)


def _examples_only(found: Dict[str, Any]) -> Dict[str, Any]:
  return {key: value for key, value in found.items() if key not in ("max_patches", "captions")}


def of_tfds(identity: Dict[str, str], examples: int) -> Dict[str, Any]:
  """The fingerprint of a TFDS split (tfds_identity) of `examples` examples."""
  identity = {"kind": "tfds", **identity, "examples": examples}
  return {**identity, "sha256": _digest(identity)}


def tfds_identity(builder, split: str) -> Dict[str, str]:
  return {"name": builder.name, "version": str(builder.version), "split": split}


def _shown(paths: List[str]) -> str:
  more = f", +{len(paths) - _SHOWN} more" if len(paths) > _SHOWN else ""
  return f" ({', '.join(sorted(paths)[:_SHOWN])}{more})" if paths else ""


def _comparable(old: Dict[str, Any], new: Dict[str, Any]) -> Dict[str, Any]:
  """`new` as `old` records a file: records written before modification times were
  kept hold only sizes."""
  if any(isinstance(value, int) for value in old.values()):
    return {path: value[0] if isinstance(value, list) else value for path, value in new.items()}
  return new


def files_change(old: Dict[str, Any], new: Dict[str, Any]) -> Dict[str, List[str]]:
  """{kind: files} for the kinds relabelled (moved to another class folder, known by the
  same name, size and time), added, removed and replaced (same path and class, other size
  or time)."""
  new = _comparable(old, new)
  gone = {path for path in old if new.get(path) != old[path]}
  came = {path for path in new if old.get(path) != new[path]}
  by_name_and_stat: Dict[Tuple[str, str], List[str]] = {}
  for path in sorted(gone):
    by_name_and_stat.setdefault((os.path.basename(path), str(old[path])), []).append(path)
  relabelled = []
  for path in sorted(came):
    folder, name = os.path.split(path)
    sources = [p for p in by_name_and_stat.get((name, str(new[path])), [])
               if os.path.dirname(p) != folder and p in gone]
    if sources:
      gone.discard(sources[0])
      came.discard(path)
      relabelled.append(f"{sources[0]} -> {folder}/")
  return {"relabelled": relabelled, "added": sorted(came - gone),
          "removed": sorted(gone - came), "replaced": sorted(came & gone)}


def relabelled_in_file(old: Dict[str, Any], new: Dict[str, Any]) -> List[str]:
  """The files of both multi-label fingerprints whose labels (labels.csv) differ."""
  before, after = old.get("labels"), new.get("labels")
  if before is None or after is None:
    return []
  return sorted(path for path in set(before) & set(after) if before[path] != after[path])


def changed(old: Dict[str, Any], new: Dict[str, Any]) -> bool:
  """Whether two fingerprints of one split differ (an older record read as it was kept)."""
  if _setting_change(old, new):
    return True
  if old.get("kind") == new.get("kind") == "files" and "files" in old:
    return bool(any(files_change(old["files"], new["files"]).values())
                or relabelled_in_file(old, new))
  return old["sha256"] != new["sha256"]


def describe_files_change(old: Dict[str, Any], new: Dict[str, Any]) -> str:
  """'N relabelled (...), N added (...), ...' (see files_change), kinds without files left
  out."""
  return ", ".join(f"{len(paths)} {kind}{_shown(paths)}"
                   for kind, paths in files_change(old, new).items() if paths)


def labels_kept(old: Dict[str, Any], new: Dict[str, Any]) -> bool:
  """Whether every example the run saw keeps its label and no example came or went: only
  files replaced in place (what fixing a corrupt image does), the same NaFlex budget and
  the same captions."""
  if (_setting_change(old, new) or not old.get("kind") == new.get("kind") == "files"
      or "files" not in old):
    return False
  change = files_change(old["files"], new["files"])
  return not (change["relabelled"] or change["added"] or change["removed"]
              or relabelled_in_file(old, new))


def describe_change(old: Dict[str, Any], new: Dict[str, Any]) -> str:
  """What differs between two fingerprints of one split, on one line."""
  settings = _setting_change(old, new)
  if settings and not changed(_examples_only(old), _examples_only(new)):
    return settings
  prefix = f"{settings}; " if settings else ""
  if old.get("kind") == new.get("kind") == "files" and "files" in old:
    parts = [describe_files_change(old["files"], new["files"])]
    in_file = relabelled_in_file(old, new)
    if in_file:
      parts.append(f"{len(in_file)} relabelled in labels.csv{_shown(in_file)}")
    return prefix + "files " + ", ".join(part for part in parts if part)
  keys = [k for k in ("kind", "name", "version", "split", "examples") if old.get(k) != new.get(k)]
  if not keys:
    return prefix + "its examples differ (as many as before)"
  return prefix + ", ".join(f"{k} {old.get(k)} -> {new.get(k)}" for k in keys)
