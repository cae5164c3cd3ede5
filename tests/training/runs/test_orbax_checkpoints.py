"""Orbax train-state checkpoints: resume and refusal to resume into the wrong shapes."""

import os
import pathlib
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vit_jax.base import storage
from vit_jax.training.runs import orbax_checkpoints


def state(value=1.0):
  return {"step": jnp.array(3), "params": {"w": jnp.full((4, 2), value)}}


def test_save_then_restore(tmp_path):
  checkpointer = orbax_checkpoints.Checkpointer(str(tmp_path), keep=2)
  assert checkpointer.latest_step() is None
  for step in (1, 2, 3):
    checkpointer.save(step, state(float(step)))
  checkpointer.wait()
  assert checkpointer.latest_step() == 3
  restored = checkpointer.restore(jax.eval_shape(state))
  np.testing.assert_array_equal(restored["params"]["w"], 3.0)
  checkpointer.close()
  reopened = orbax_checkpoints.Checkpointer(str(tmp_path), keep=2)
  assert reopened.latest_step() == 3
  np.testing.assert_array_equal(reopened.restore(jax.eval_shape(state), step=2)["params"]["w"],
                                2.0)
  reopened.close()


def test_mismatched_state_is_refused_and_kept(tmp_path):
  checkpointer = orbax_checkpoints.Checkpointer(str(tmp_path))
  checkpointer.save(5, state())
  checkpointer.wait()
  wrong = {"step": jax.ShapeDtypeStruct((), jnp.int32),
           "params": {"w": jax.ShapeDtypeStruct((8, 8), jnp.float32)}}
  with pytest.raises(orbax_checkpoints.CheckpointRestoreError, match="cannot resume from") as e:
    checkpointer.restore(wrong)
  assert "\n" not in str(e.value)
  assert checkpointer.latest_step() == 5
  checkpointer.close()


def test_a_non_finite_state_is_never_saved(tmp_path):
  checkpointer = orbax_checkpoints.Checkpointer(str(tmp_path), keep=1)
  checkpointer.save(1, state(1.0))
  checkpointer.wait()
  for bad in (float("nan"), float("inf")):
    with pytest.raises(orbax_checkpoints.NonFiniteStateError,
                       match="good checkpoint \\(1\\) is kept"):
      checkpointer.save(2, state(bad))
  checkpointer.wait()
  assert checkpointer.all_steps() == [1]  # keep=1: retention had nothing newer to keep
  checkpointer.close()


def test_nothing_is_created_before_the_first_save(tmp_path):
  checkpointer = orbax_checkpoints.Checkpointer(str(tmp_path / "run"))
  assert checkpointer.latest_step() is None
  assert checkpointer.restore_latest(jax.eval_shape(state)) == (None, None)
  checkpointer.close()
  assert not (tmp_path / "run").exists()


def write_tree(directory, step, tree):
  import orbax.checkpoint as ocp
  manager = ocp.CheckpointManager(os.path.join(directory, "checkpoints"),
                                  options=ocp.CheckpointManagerOptions(create=True))
  manager.save(step, args=ocp.args.StandardSave(tree))
  manager.wait_until_finished()
  manager.close()


def write_steps(directory, values):
  """Checkpoints step -> value, written without the finite gate (as older versions did)."""
  for step, value in values.items():
    write_tree(directory, step, state(value))


def damage(step_dir, how):
  """Damages a complete checkpoint the ways disks and killed copies do."""
  files = sorted(p for p in pathlib.Path(step_dir).rglob("*") if p.is_file())
  if how == "truncated":
    for p in files:
      if p.parent.name == "d":
        p.write_bytes(p.read_bytes()[:7])
  elif how == "metadata_missing":
    for p in files:
      if p.name == "_METADATA":
        p.unlink()
  elif how == "garbage":
    for p in files:
      if p.parent.name == "d":
        p.write_bytes(os.urandom(p.stat().st_size))
  elif how == "emptied":
    shutil.rmtree(os.path.join(step_dir, "default"))


@pytest.mark.parametrize("how", ["truncated", "metadata_missing", "garbage", "emptied"])
def test_damaged_latest_falls_back_to_the_newest_intact_one(tmp_path, how, capfd):
  write_steps(str(tmp_path), {100: 1.0, 150: 2.0})
  damage(tmp_path / "checkpoints" / "150", how)
  checkpointer = orbax_checkpoints.Checkpointer(str(tmp_path))
  restored, step = checkpointer.restore_latest(jax.eval_shape(state))
  assert step == 100
  np.testing.assert_array_equal(restored["params"]["w"], 1.0)
  err = capfd.readouterr().err
  assert "checkpoint 150 cannot be used" in err and "resuming from checkpoint 100" in err
  assert "Traceback" not in err  # orbax's per-read error logs are silenced
  # The damaged one is set aside, not deleted, and a new save of step 150 is possible.
  assert checkpointer.all_steps() == [100]
  [moved] = os.listdir(tmp_path / "damaged_checkpoints")
  assert moved.startswith("150-")
  checkpointer.save(150, state(3.0))
  checkpointer.wait()
  assert checkpointer.all_steps() == [100, 150]
  checkpointer.close()


def test_objects_of_a_damaged_checkpoint_left_in_place_are_named_and_the_resume_goes_on(
    tmp_path, monkeypatch, capfd):
  """On an object store, storage.move returns the objects it could not move (commit
  marker first: what stays is no checkpoint); the resume names them and goes on."""
  write_steps(str(tmp_path), {100: 1.0, 150: 2.0})
  damage(tmp_path / "checkpoints" / "150", "truncated")
  stuck = [f"gs://b/run/checkpoints/150/default/d/{i}" for i in range(7)]
  real_move = storage.move
  monkeypatch.setattr(storage, "move", lambda source, dest: real_move(source, dest) or stuck)
  checkpointer = orbax_checkpoints.Checkpointer(str(tmp_path))
  restored, step = checkpointer.restore_latest(jax.eval_shape(state))
  assert step == 100 and checkpointer.all_steps() == [100]
  np.testing.assert_array_equal(restored["params"]["w"], 1.0)
  err = capfd.readouterr().err
  assert ("could not move 7 object(s) of damaged checkpoint 150; left in place: "
          f"{', '.join(stuck[:5])} and 2 more") in err, err
  checkpointer.close()


def test_a_non_finite_latest_checkpoint_is_skipped(tmp_path):
  write_steps(str(tmp_path), {3: 1.0, 4: float("nan")})
  checkpointer = orbax_checkpoints.Checkpointer(str(tmp_path))
  restored, step = checkpointer.restore_latest(jax.eval_shape(state))
  assert step == 3 and np.isfinite(restored["params"]["w"]).all()
  checkpointer.close()


def test_refused_only_when_no_checkpoint_is_usable(tmp_path):
  write_steps(str(tmp_path), {100: 1.0, 150: 2.0})
  for step in (100, 150):
    damage(tmp_path / "checkpoints" / str(step), "truncated")
  checkpointer = orbax_checkpoints.Checkpointer(str(tmp_path))
  with pytest.raises(orbax_checkpoints.CheckpointRestoreError,
                     match="no checkpoint in .* \\(steps 150, 100\\) can be used") as e:
    checkpointer.restore_latest(jax.eval_shape(state))
  assert "\n" not in str(e.value) and "nothing was deleted" in str(e.value)
  assert checkpointer.all_steps() == [100, 150]
  checkpointer.close()


def test_train_states_keep_one_layout_with_or_without_the_polyak_average(tmp_path):
  """A state saved without the polyak field (as before Polyak averaging existed)
  restores into today's TrainState with averaging off; with it on, the average
  round-trips."""
  import optax
  from vit_jax.training import update_step
  optimizer = optax.sgd(0.1, momentum=0.9)
  params = {"w": jnp.arange(3.0)}
  plain = update_step.create_train_state(params, optimizer)
  write_tree(str(tmp_path / "old"), 5, {"step": plain.step, "params": plain.params,
                                        "opt_state": plain.opt_state})
  checkpointer = orbax_checkpoints.Checkpointer(str(tmp_path / "old"))
  restored, step = checkpointer.restore_latest(jax.eval_shape(lambda: plain))
  assert step == 5 and restored.polyak is None
  np.testing.assert_array_equal(restored.params["w"], [0.0, 1.0, 2.0])
  checkpointer.close()

  averaged = update_step.create_train_state(params, optimizer, polyak=True)
  averaged = averaged.replace(polyak={"w": jnp.full(3, 7.0)})
  checkpointer = orbax_checkpoints.Checkpointer(str(tmp_path / "new"))
  checkpointer.save(1, averaged)
  checkpointer.wait()
  restored, _ = checkpointer.restore_latest(jax.eval_shape(lambda: averaged))
  np.testing.assert_array_equal(restored.polyak["w"], 7.0)
  checkpointer.close()



def test_a_failed_restore_leaves_no_read_running(tmp_path, monkeypatch):
  """orbax stops a restore at the first failed read; the reads of the other arrays must
  finish before its event loop closes, not land later on a closed loop (which Python
  reports as exceptions it had to ignore): every task a restore started is done when it
  returns, so nothing can call back into its closed loop afterwards."""
  import asyncio
  import gc
  import sys
  ignored, tasks = [], []
  monkeypatch.setattr(sys, "unraisablehook", ignored.append)
  policy = orbax_checkpoints._FinishingTasksPolicy  # pylint: disable=protected-access
  make_loop = policy.new_event_loop

  def recording_loop(self):
    """The loop the restore gets, keeping its tasks (a pending one could be collected)."""
    loop = make_loop(self)
    loop.set_task_factory(
        lambda loop, coro, **kwargs: tasks.append(asyncio.Task(coro, loop=loop, **kwargs))
        or tasks[-1])
    return loop

  monkeypatch.setattr(policy, "new_event_loop", recording_loop)
  checkpointer = orbax_checkpoints.Checkpointer(str(tmp_path))
  many = {"step": jnp.array(3), "params": {f"w{i}": jnp.full((64, 64), 1.0) for i in range(16)}}
  checkpointer.save(7, many)
  checkpointer.wait()
  wrong = jax.eval_shape(lambda: many)
  wrong["params"]["w0"] = jax.ShapeDtypeStruct((8, 8), jnp.float32)
  for _ in range(5):
    with pytest.raises(orbax_checkpoints.CheckpointRestoreError, match="cannot resume from"):
      checkpointer.restore(wrong)
  checkpointer.close()
  assert tasks and all(task.done() for task in tasks)
  gc.collect()
  assert not ignored, [str(u.exc_value) for u in ignored]
