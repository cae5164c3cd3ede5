"""Train-state checkpoints in the workdir (orbax), so that rerunning a command resumes.

Saves are asynchronous and atomic (orbax writes `<step>.orbax-checkpoint-tmp` and
renames it when complete), so a kill during a save leaves the previous step intact.
Only finite states are ever saved, so retention (the last `keep`) never deletes the
newest finite checkpoint. Restores take an abstract target (shapes + shardings), which
also lets a checkpoint load onto another mesh or device count; a damaged (or non-finite)
latest checkpoint is set aside and the newest intact one is used instead.
"""

import asyncio
import contextlib
import dataclasses
import logging
import os
import re
import time
from typing import Any, List, Optional, Tuple

import jax
import jax.numpy as jnp
import orbax.checkpoint as ocp
from jax.experimental import multihost_utils

from vit_jax.base import console, errors, object_moves, storage, store_faults, workdir_files
from vit_jax.base.console import log
from vit_jax.training.runs import store_retries


class CheckpointRestoreError(errors.UserError, RuntimeError):
  """The workdir holds checkpoints, none of which fits this run."""

  def __init__(self, message: str, reason: str = ""):
    super().__init__(message)
    self.reason = reason or message


class NonFiniteStateError(errors.UserError, FloatingPointError):
  """A train state with NaN/Inf values, which must never be saved."""


class DiskFullError(errors.UserError, OSError):
  """No room for a checkpoint; the message names the directory, the sizes and the fix."""


# A save holds up to two copies of the state while orbax merges its per-process files,
# plus metadata; compression only makes this an upper bound.
_SPACE_MARGIN = 2.0
_SPACE_SLACK_BYTES = 1 << 20
_DISK_FULL_SIGNS = ("No space left on device", "os_error_code='28'", "ENOSPC")


@jax.jit
def all_finite(tree: Any) -> jax.Array:
  """True when every floating-point leaf of `tree` is finite (one fused reduction)."""
  leaves = [jnp.all(jnp.isfinite(x)) for x in jax.tree.leaves(tree)
            if jnp.issubdtype(x.dtype, jnp.inexact)]
  return jnp.all(jnp.stack(leaves)) if leaves else jnp.array(True)


@contextlib.contextmanager
def _silenced_library_logs():
  """orbax logs every step of a restore, and each failed read with a traceback (dozens
  per damaged checkpoint); the outcome is reported by us in one line instead."""
  if console.verbose_requested():
    yield
    return
  logging.disable(logging.CRITICAL)
  try:
    yield
  finally:
    logging.disable(logging.NOTSET)


class _LoopThatFinishesItsTasks(asyncio.SelectorEventLoop):
  """orbax runs a restore (and each save, in a thread of its own) in a fresh event loop and
  closes it as soon as one read or write fails, while those of the other arrays are still
  in flight: they then complete against a closed loop (a callback into it, which
  tensorstore reports with a traceback per array; a task destroyed while pending). This
  loop lets them finish (their results or errors are dropped) before it closes."""

  def close(self):
    pending = [task for task in asyncio.all_tasks(self) if not task.done()]
    if pending and not self.is_running() and not self.is_closed():
      self.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
    super().close()


class _FinishingTasksPolicy(asyncio.DefaultEventLoopPolicy):

  def new_event_loop(self):
    return _LoopThatFinishesItsTasks()


@contextlib.contextmanager
def _tasks_finish_before_their_loop_closes():
  """Applies to the loops orbax creates in any thread meanwhile (not to a loop already
  running, as in a notebook, where orbax uses a loop of its own). Nests: an inner use (a
  restore while saves may run) keeps the outer one's."""
  previous = asyncio.get_event_loop_policy()
  if isinstance(previous, _FinishingTasksPolicy):
    yield
    return
  asyncio.set_event_loop_policy(_FinishingTasksPolicy())
  try:
    yield
  finally:
    asyncio.set_event_loop_policy(previous)


_MISMATCH_HINT = ("it was written by a different model/optimizer config or is damaged: "
                  "rerun with the original config, or use a new --workdir (nothing was "
                  "deleted)")


def _stored_fields(state: Any) -> Any:
  """A train state as saved: a dict of its fields without the None ones (features that are
  off, such as the Polyak average), so turning a feature off keeps the checkpoint layout
  of versions that did not have it."""
  if not dataclasses.is_dataclass(state):
    return state
  return {field.name: getattr(state, field.name) for field in dataclasses.fields(state)
          if getattr(state, field.name) is not None}


def _rebuilt(abstract_state: Any, restored: Any) -> Any:
  if dataclasses.is_dataclass(abstract_state):
    return abstract_state.replace(**restored)
  return restored


def _reason(error: BaseException) -> str:
  """orbax's first line, without its advice to pad or truncate arrays (`strict=False`,
  `enable_padding_and_truncation`): that would load a state of another shape."""
  text = str(error).strip()
  if not text:
    return type(error).__name__
  text = re.split(r"\s*(?:Truncating/padding is disabled|To enable it, set)",
                  text.splitlines()[0])[0]
  return text.rstrip(". ")[:300]


class Checkpointer:
  """Keeps the last `keep` train states under `<workdir>/checkpoints/<step>`.

  Nothing is created on disk until the first save: a run that fails its checks leaves
  no empty `checkpoints/` behind.
  """

  def __init__(self, workdir: str, *, keep: int = 2):
    root = workdir if storage.is_url(workdir) else os.path.abspath(workdir)
    self.directory = storage.join(root, workdir_files.CHECKPOINTS)
    self.damaged_directory = storage.join(root, workdir_files.DAMAGED_CHECKPOINTS)
    self._keep = keep
    self._manager: Optional[ocp.CheckpointManager] = None
    self._pending_step = 0  # the step of the save in flight, for error messages
    self._while_open = contextlib.ExitStack()

  def _open(self) -> ocp.CheckpointManager:
    if self._manager is None:
      if storage.is_url(self.directory):
        store_retries.bound()
      self._while_open.enter_context(_tasks_finish_before_their_loop_closes())  # saves'
      self._manager = ocp.CheckpointManager(
          self.directory,
          options=ocp.CheckpointManagerOptions(max_to_keep=self._keep, create=True,
                                               cleanup_tmp_directories=True))
    return self._manager

  def all_steps(self) -> List[int]:
    """Steps of the complete checkpoints, oldest first."""
    if self._manager is None and not storage.isdir(self.directory):
      return []
    return sorted(self._open().all_steps())

  def saved_steps(self) -> List[int]:
    """The complete checkpoints on disk now, oldest first (all_steps() is orbax's view,
    which includes a save in flight or one that failed in the background)."""
    return sorted(ocp.utils.checkpoint_steps(self.directory)) if storage.isdir(
        self.directory) else []

  def latest_step(self) -> Optional[int]:
    steps = self.all_steps()
    return steps[-1] if steps else None

  def restore(self, abstract_state: Any, step: Optional[int] = None) -> Any:
    """Restores `step` (default: latest) laid out like `abstract_state`."""
    step = self.latest_step() if step is None else step
    try:
      with _silenced_library_logs(), _tasks_finish_before_their_loop_closes():
        restored = self._open().restore(
            step, args=ocp.args.StandardRestore(_stored_fields(abstract_state)))
      return _rebuilt(abstract_state, restored)
    except Exception as e:  # orbax raises many types; all mean "does not fit".
      self.close()  # a failed restore can leave the manager unusable for other steps
      raise CheckpointRestoreError(
          f"cannot resume from {self.directory}/{step} ({_reason(e)}); {_MISMATCH_HINT}",
          reason=_reason(e)) from None

  def restore_latest(self, abstract_state: Any) -> Tuple[Any, Optional[int]]:
    """(state, step) of the newest checkpoint that restores and is finite; (None, None)
    when there is none. Newer ones that fail are moved to `damaged_checkpoints/`."""
    failed = []
    for step in reversed(self.all_steps()):
      try:
        state = self.restore(abstract_state, step)
        if not bool(all_finite(state)):
          raise CheckpointRestoreError("", reason="it holds NaN/Inf values")
      except CheckpointRestoreError as e:
        failed.append((step, e))
        continue
      if failed:
        self._set_aside([s for s, _ in failed])
        newest, error = failed[0]
        log.warning("checkpoint %d cannot be used (%s); resuming from checkpoint %d instead "
                    "(moved the unusable one(s) to %s)", newest, error.reason, step,
                    self.damaged_directory)
      return state, step
    if failed:
      steps = ", ".join(str(s) for s, _ in failed)
      raise CheckpointRestoreError(
          f"cannot resume: no checkpoint in {self.directory} (steps {steps}) can be used "
          f"(step {failed[0][0]}: {failed[0][1].reason}); {_MISMATCH_HINT}")
    return None, None

  def _set_aside(self, steps: List[int]) -> None:
    """Moves unusable checkpoints out of orbax's sight (later saves may reuse the step)."""
    if jax.process_index() == 0:
      stamp = time.strftime("%Y%m%d-%H%M%S")
      for step in steps:  # object stores copy, then delete: a kill leaves both, never none
        left = storage.move(storage.join(self.directory, str(step)),
                            storage.join(self.damaged_directory, f"{step}-{stamp}"))
        if left:  # its commit marker moved first: what stays is no checkpoint to orbax
          log.warning("could not move %d object(s) of damaged checkpoint %d; left in place: "
                      "%s", len(left), step, object_moves.named(left))
    if jax.process_count() > 1:
      multihost_utils.sync_global_devices("vit_jax: damaged checkpoints set aside")
    self.close()  # the next use re-reads the steps

  def save(self, step: int, state: Any) -> None:
    """Starts an async save of `state` at `step` (a no-op if that step exists).

    Raises NonFiniteStateError instead of saving a state with NaN/Inf values.
    """
    if step in self.all_steps():
      return
    if not bool(all_finite(state)):
      raise NonFiniteStateError(
          f"the train state of step {step} has NaN/Inf values; it was not saved and the last "
          f"good checkpoint ({self.latest_step() or 'none'}) is kept in {self.directory}: "
          "lower config.base_lr or check the data, then rerun to resume from it")
    self._check_space(step, state)
    self._pending_step = step
    with self._storage_errors_as_one_line(step), _silenced_library_logs():  # see wait()
      self._open().save(step, args=ocp.args.StandardSave(_stored_fields(state)), force=True)

  def _check_space(self, step: int, state: Any) -> None:
    """Refuses a save that cannot fit, before orbax fails half-way in a background thread
    (the previous checkpoints stay intact either way)."""
    free = storage.free_bytes(self.directory)
    if free is None:  # object stores have no free space to run out of
      return
    needed = _SPACE_MARGIN * sum(x.nbytes for x in jax.tree.leaves(state)) + _SPACE_SLACK_BYTES
    if free < needed:
      raise DiskFullError(self._disk_full_message(
          step, f"needs about {needed / 2**20:.1f} MiB, {free / 2**20:.1f} MiB free"))

  def _disk_full_message(self, step: int, detail: str) -> str:
    kept = self.latest_step()
    return (f"disk full: no room for the checkpoint of step {step} in {self.directory} "
            f"({detail}); free some space (or lower config.keep_checkpoints) and rerun the "
            f"same command to resume from {f'step {kept}' if kept else 'the start'}")

  @contextlib.contextmanager
  def _storage_errors_as_one_line(self, step: int):
    try:
      yield
    except storage.StorageUnavailable:
      raise
    except Exception as e:  # orbax wraps ENOSPC in ValueError/OSError/XlaRuntimeError
      if any(sign in str(e) for sign in _DISK_FULL_SIGNS):
        raise DiskFullError(self._disk_full_message(step, "No space left on device")) from None
      if storage.is_url(self.directory) and store_faults.stopped_answering(e):
        raise storage.unavailable(self.directory, e) from None
      raise

  def wait(self) -> None:
    if self._manager is not None and not self._store_lost():
      # orbax logs a failed background save with its traceback before raising it here;
      # the failure is reported once, in one line, by _storage_errors_as_one_line.
      with self._storage_errors_as_one_line(self._pending_step), _silenced_library_logs():
        self._manager.wait_until_finished()

  def close(self) -> None:
    if self._manager is not None and not self._store_lost():  # closing waits for saves
      self._manager.close()
    self._manager = None
    self._while_open.close()

  def _store_lost(self) -> bool:
    """The store stopped answering: a save in flight cannot finish (tensorstore would
    retry its writes for many minutes), and is never committed, so the previous
    checkpoints are what a rerun resumes from."""
    return storage.connection_lost(self.directory)
