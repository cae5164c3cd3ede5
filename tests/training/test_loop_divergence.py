"""vit_jax.training.loop when a run diverges: a NaN or Inf loss, gradient or parameter stops
the run in one line naming the step, and never becomes a checkpoint (not even the one a
SIGTERM asks for), so a rerun resumes from the last good state."""

import dataclasses
import functools
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from helpers import demo_config, sigterm_at_step
from test_loop import checkpoint_steps, copy_of
from vit_jax import load_npz
from vit_jax.base import errors
from vit_jax.data import device_batches
from vit_jax.training import loop, state_and_step
from vit_jax.training.runs import orbax_checkpoints


def test_nan_loss_stops_and_keeps_the_last_good_checkpoint(demo_run, tmp_path):
  workdir = copy_of(demo_run, tmp_path)
  exploding = demo_config(total_steps=12, checkpoint_every=1, progress_every=5,
                          base_lr=1e38)
  with pytest.raises(FloatingPointError, match="is (nan|inf) at step .*last good checkpoint "
                     r"\(step \d+\) is kept in"):
    loop.train_and_evaluate(exploding, workdir)
  steps = sorted(int(d) for d in os.listdir(os.path.join(workdir, "checkpoints")) if d.isdigit())
  assert steps[-1] < 12
  module, params = load_npz(os.path.join(workdir, "params.npz"))  # from the first run
  assert all(np.isfinite(v).all() for v in jax.tree.leaves(params))


def test_a_divergence_before_any_checkpoint_names_its_step_and_says_so(tmp_path,
                                                                      monkeypatch):
  workdir = str(tmp_path / "run")
  monkeypatch.setattr(state_and_step, "build", diverging_from(3, poison_loss=True))
  with pytest.raises(FloatingPointError) as error:
    loop.train_and_evaluate(demo_config(checkpoint_every=5, progress_every=5, eval_every=10),
                             workdir)
  assert str(error.value) == (
      "loss is nan at step 3 (noticed at step 5); stopping without saving; no checkpoint "
      "was saved before it, so a rerun starts from scratch: lower config.base_lr or check "
      "the data first")
  assert isinstance(error.value, errors.UserError)  # a command's one `error:` line
  assert checkpoint_steps(workdir) == []


def test_a_divergence_without_clipping_names_the_clip_key(demo_run, tmp_path):
  checkpointer = orbax_checkpoints.Checkpointer(copy_of(demo_run, tmp_path), keep=2)  # steps 3, 6
  with pytest.raises(errors.Diverged) as error:
    loop.check_finite(9, {"loss": 2.3, "grad_norm": float("inf")}, checkpointer, clipped=False)
  assert str(error.value) == (
      f"grad_norm is inf at step 9; stopping without saving; the last good checkpoint (step 6) "
      f"is kept in {checkpointer.directory}: lower config.base_lr, set "
      "config.grad_norm_clip=1.0 or check the data, then rerun to resume from it")


def diverging_from(bad_step, poison_loss):
  """state_and_step.build whose step turns the state's params (and the loss, if poison_loss) NaN
  from bad_step on. The poison runs after the compiled train step, which stays the shared
  demo program (a program of its own would cost a compile)."""
  original = state_and_step.build

  def build(config, module, mesh, *args, **kwargs):
    run = original(config, module, mesh, *args, **kwargs)

    @functools.partial(jax.jit, out_shardings=(run.state_shardings, run.replicated))
    def poison(state, step_metrics):
      bad = state.step >= bad_step
      params = jax.tree.map(lambda x: jnp.where(bad, jnp.nan, x), state.params)
      if poison_loss:
        step_metrics = {**step_metrics, "loss": jnp.where(bad, jnp.nan, step_metrics["loss"])}
      return state.replace(params=params), step_metrics
    return dataclasses.replace(run, step=lambda *inputs: poison(*run.step(*inputs)))
  return build


@pytest.mark.parametrize("poison_loss", [True, False], ids=["nan_loss", "nan_params_only"])
def test_sigterm_never_saves_a_diverged_state(tmp_path, monkeypatch, poison_loss):
  workdir = str(tmp_path / "run")
  config = demo_config(checkpoint_every=3, progress_every=50, eval_every=50, keep_checkpoints=1)
  monkeypatch.setattr(device_batches, "prefetch_to_device", sigterm_at_step(5))
  monkeypatch.setattr(state_and_step, "build", diverging_from(5, poison_loss))
  with pytest.raises(FloatingPointError, match="at step 5|of step 5 has NaN"):
    loop.train_and_evaluate(config, workdir)
  assert checkpoint_steps(workdir) == [3]  # retention (keep 1) kept the last good one
  monkeypatch.undo()
  result = loop.train_and_evaluate(demo_config(), workdir)  # resumes from 3
  assert np.isfinite(result["eval/loss"])
