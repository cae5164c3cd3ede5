"""Train-state checkpoints in the workdir (orbax), so that rerunning a command resumes.

Saves are asynchronous and atomic (orbax writes `<step>.orbax-checkpoint-tmp` and
renames it when complete), so a kill during a save leaves the previous step intact.
Restores take an abstract target (shapes + shardings), which also lets a checkpoint
load onto another mesh or device count.
"""

import os
from typing import Any, Optional

import orbax.checkpoint as ocp


class CheckpointRestoreError(RuntimeError):
  """The workdir holds a checkpoint that does not fit this run."""


class Checkpointer:
  """Keeps the last `keep` train states under `<workdir>/checkpoints/<step>`."""

  def __init__(self, workdir: str, *, keep: int = 2):
    self.directory = os.path.join(os.path.abspath(workdir), "checkpoints")
    self._manager = ocp.CheckpointManager(
        self.directory,
        options=ocp.CheckpointManagerOptions(max_to_keep=keep, create=True,
                                             cleanup_tmp_directories=True))

  def latest_step(self) -> Optional[int]:
    return self._manager.latest_step()

  def restore(self, abstract_state: Any, step: Optional[int] = None) -> Any:
    """Restores `step` (default: latest) laid out like `abstract_state`."""
    step = self.latest_step() if step is None else step
    try:
      return self._manager.restore(step, args=ocp.args.StandardRestore(abstract_state))
    except Exception as e:  # orbax raises many types; all mean "does not fit".
      reason = str(e).splitlines()[0][:300] if str(e) else type(e).__name__
      raise CheckpointRestoreError(
          f"cannot resume from {self.directory}/{step} ({reason}); it was written by a "
          "different model/optimizer config or is damaged: rerun with the original config, "
          "or use a new --workdir (nothing was deleted)") from None

  def save(self, step: int, state: Any) -> None:
    """Starts an async save of `state` at `step` (a no-op if that step exists)."""
    if step not in self._manager.all_steps():
      self._manager.save(step, args=ocp.args.StandardSave(state), force=True)

  def wait(self) -> None:
    self._manager.wait_until_finished()

  def close(self) -> None:
    self._manager.close()
