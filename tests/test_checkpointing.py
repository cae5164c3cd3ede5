"""Orbax train-state checkpoints: resume and refusal to resume into the wrong shapes."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vit_jax import checkpointing


def state(value=1.0):
  return {"step": jnp.array(3), "params": {"w": jnp.full((4, 2), value)}}


def test_save_then_restore(tmp_path):
  checkpointer = checkpointing.Checkpointer(str(tmp_path), keep=2)
  assert checkpointer.latest_step() is None
  for step in (1, 2, 3):
    checkpointer.save(step, state(float(step)))
  checkpointer.wait()
  assert checkpointer.latest_step() == 3
  restored = checkpointer.restore(jax.eval_shape(state))
  np.testing.assert_array_equal(restored["params"]["w"], 3.0)
  checkpointer.close()
  reopened = checkpointing.Checkpointer(str(tmp_path), keep=2)
  assert reopened.latest_step() == 3
  np.testing.assert_array_equal(reopened.restore(jax.eval_shape(state), step=2)["params"]["w"],
                                2.0)


def test_mismatched_state_is_refused_and_kept(tmp_path):
  checkpointer = checkpointing.Checkpointer(str(tmp_path))
  checkpointer.save(5, state())
  checkpointer.wait()
  wrong = {"step": jax.ShapeDtypeStruct((), jnp.int32),
           "params": {"w": jax.ShapeDtypeStruct((8, 8), jnp.float32)}}
  with pytest.raises(checkpointing.CheckpointRestoreError, match="cannot resume from") as e:
    checkpointer.restore(wrong)
  assert "\n" not in str(e.value)
  assert checkpointer.latest_step() == 5
