"""Where `make_arrayrecord --output` may write: a new or empty folder, or one holding only
its own shards (a rerun resumes them), never the source, a folder inside it, a training
run's workdir or a file; and a split's shards in one count (a changed
--examples_per_shard wrote a second set beside the first). Each refusal is one line,
before anything is written.
"""

import fnmatch
import os
import re
from typing import List

from vit_jax.base import errors

# The names arrayrecord.write_split writes (finished, temporary and pending).
_OWN = ("arrayrecord.json", "*.array_record", "*.array_record.tmp", "*.labels.npy",
        "*.labels.npy.tmp.npy", "*.captions.json", "*.pending.json", ".*.tmp")


def _foreign(folder: str) -> List[str]:
  return sorted(name for name in os.listdir(folder)
                if not any(fnmatch.fnmatch(name, pattern) for pattern in _OWN))


def check(source: str, output: str) -> None:
  """Refuses an --output that is not the shards' own folder (see the module docstring)."""
  where = os.path.realpath(output)
  if os.path.exists(output) and not os.path.isdir(output):
    raise errors.InvalidInput(f"--output={output} is a file, not a folder: name a new folder "
                              "for the shards")
  if os.path.isdir(source):
    root = os.path.realpath(source)
    if where == root or where.startswith(root + os.sep):
      raise errors.InvalidInput(
          f"--output={output} is {'the source folder' if where == root else 'inside the source folder'}"
          f" {source}: the shards would become part of the data it reads; name a folder "
          "outside it")
  if os.path.isdir(output):
    foreign = _foreign(output)
    if foreign:
      shown = ", ".join(foreign[:3]) + (f" (+{len(foreign) - 3} more)" if len(foreign) > 3 else "")
      raise errors.InvalidInput(f"--output={output} already holds files make_arrayrecord did "
                                f"not write ({shown}): name a new or empty folder")


def check_shard_count(root: str, split: str, shards: List[str]) -> None:
  """Refuses to write `shards` of `split` beside a set of another count."""
  pattern = re.compile(rf"^{re.escape(split)}-\d{{5}}-of-(\d{{5}})\.array_record(\.tmp)?$")
  counts = {int(m.group(1)) for m in map(pattern.match, os.listdir(root)) if m}
  others = counts - {len(shards)}
  if others:
    raise errors.InvalidInput(
        f"{root} holds split {split} in {min(others)} shard(s); this --examples_per_shard "
        f"writes {len(shards)}: rerun with the --examples_per_shard that wrote them, or "
        "write to another --output")
