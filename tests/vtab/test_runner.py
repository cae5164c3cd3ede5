"""vtab.runner.set_aside: a run of other settings moves to superseded/<n>/, and what the
store could not move is named in one line, not left for the new run to resume."""

import pytest

from vit_jax.base import errors, storage
from vit_jax.vtab import runner


def _run(folder):
  (folder / "checkpoints" / "4").mkdir(parents=True)
  (folder / "checkpoints" / "4" / "array").write_text("a")
  (folder / "config.json").write_text("{}")


def test_set_aside_moves_the_run(tmp_path):
  _run(tmp_path / "alpha")
  dest = runner.set_aside(str(tmp_path / "alpha"))
  assert dest == str(tmp_path / "alpha" / runner.SUPERSEDED / "1")
  assert sorted(p.name for p in (tmp_path / "alpha").iterdir()) == [runner.SUPERSEDED]
  assert (tmp_path / "alpha" / runner.SUPERSEDED / "1" / "checkpoints" / "4" / "array").exists()


def test_what_cannot_be_moved_is_named_in_one_line(tmp_path, monkeypatch):
  """An object store's move returns the objects it left (base/object_moves)."""
  workdir = tmp_path / "alpha"
  _run(workdir)
  stuck = f"{workdir}/checkpoints/4/array"
  real_move = storage.move

  def move(source, dest):
    if source.endswith("checkpoints"):
      return [stuck]  # nothing of it moved
    return real_move(source, dest)

  monkeypatch.setattr(storage, "move", move)
  with pytest.raises(errors.UserError) as raised:
    runner.set_aside(str(workdir))
  assert str(raised.value) == (
      f"could not move 1 object(s) of the earlier run in {workdir} to {workdir}/superseded/1: "
      f"{stuck}; move or delete them, then rerun (nothing was deleted)")
  assert (workdir / "checkpoints" / "4" / "array").exists()
