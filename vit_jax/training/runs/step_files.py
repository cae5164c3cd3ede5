"""A run's checkpoint of any step as the model file commands read: WORKDIR/checkpoints/STEP
(an orbax train state, vit_jax.training.runs.orbax_checkpoints) written, into a folder the
caller owns, as that step's evaluated params in the released layout (what params.npz would
hold had the run ended there: the Polyak average where the run keeps one), with the
vocabulary the run's config names copied beside it (an image-text run's zero-shot reads it).
The run's own files are only read."""

import json
import os
from typing import Optional

from vit_jax.base import errors, storage, workdir_files
from vit_jax.checkpoints import npz


def step_of(path: str) -> Optional[int]:
  """The step of WORKDIR/checkpoints/STEP, or None for any other path."""
  path = os.path.normpath(os.fspath(path))
  parent, name = os.path.split(path)
  if (os.path.basename(parent) != workdir_files.CHECKPOINTS or not name.isdigit()
      or not os.path.isdir(path)):
    return None
  return int(name)


def _restored(path: str):
  import orbax.checkpoint as ocp  # pylint: disable=import-outside-toplevel
  try:
    return ocp.StandardCheckpointer().restore(os.path.join(path, "default"))
  except (OSError, ValueError) as e:
    raise errors.InvalidInput(f"cannot read the checkpoint {path} ({' '.join(str(e).split())[:160]}"
                              "); pass another step, or the run's params.npz") from None


def model_file(path: str, folder: str) -> str:
  """`path` itself unless it is a run's checkpoint of a step; then that step's params.npz
  written into `folder` (see the module docstring), its path."""
  step = step_of(path)
  if step is None:
    return path
  workdir = os.path.dirname(os.path.dirname(os.path.normpath(path)))
  state = _restored(path)
  params = state.get("polyak") or state["params"]
  written = os.path.join(folder, workdir_files.PARAMS)
  npz.save_npz(params, written)
  config_path = os.path.join(workdir, workdir_files.CONFIG)
  if os.path.isfile(config_path):
    tokenizer = (json.loads(storage.read_text(config_path)).get("text") or {}).get("tokenizer")
    if tokenizer and os.path.isfile(tokenizer):
      storage.write_atomic(os.path.join(folder, os.path.basename(tokenizer)),
                           storage.read_bytes(tokenizer))
  return written
