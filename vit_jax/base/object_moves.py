"""Moving a folder on an object store, which has no folders: object by object, so that
moving a damaged checkpoint aside never fails on one of its objects.

A checkpoint set aside after a kill may list objects that are gone, or not readable
whole, by the time they are moved (a writer's object deleted, an upload the killed
writer never finished); one such object made the whole move fail, and the resume with
it. Each object is moved on its own: one that is gone is skipped, one that cannot be
moved is left where it is and named to the caller, and only a store that stopped
answering stops the move. Markers move first (orbax's commit_success.txt), so that
whatever is left no longer reads as a complete checkpoint.
"""

from typing import List, Sequence

from vit_jax.base import store_faults

MARKERS = ("commit_success.txt",)


def _markers_first(names: Sequence[str], markers: Sequence[str]) -> List[str]:
  return sorted(names, key=lambda name: (name.rsplit("/", 1)[-1] not in markers, name))


def move_objects(fs, key: str, dest_key: str, markers: Sequence[str] = MARKERS) -> List[str]:
  """Moves every object under `key` to the same name under `dest_key` (an fsspec
  filesystem's keys); returns the objects that could not be moved and are still there."""
  left = []
  for name in _markers_first(fs.find(key), markers):
    try:
      fs.mv(name, dest_key + name[len(key):])
    except Exception as e:  # pylint: disable=broad-except  # per object; see the docstring
      if store_faults.stopped_answering(e):
        raise
      if fs.exists(name):
        left.append(name)
  fs.invalidate_cache()
  return left


def named(left: Sequence[str], limit: int = 5) -> str:
  """The objects a move left, for a one-line message: the first `limit` and a count."""
  more = f" and {len(left) - limit} more" if len(left) > limit else ""
  return ", ".join(left[:limit]) + more
