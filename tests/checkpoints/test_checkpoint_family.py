"""checkpoint_family.of: a family's file is told as its own, claimed without loading it or
by its arrays."""

from conftest import init_params, tiny_model
from two_tower_helpers import save_tiny_lit
from vit_jax import save_npz
from vit_jax.checkpoints import checkpoint_family


def test_a_file_is_told_by_its_family(tmp_path):
  save_npz(init_params(tiny_model(3)), tmp_path / "vit.npz")
  assert checkpoint_family.of(str(tmp_path / "vit.npz")).name == "vit"  # by its arrays
  pair, _, _ = save_tiny_lit(tmp_path)
  assert checkpoint_family.of(str(pair)).name == "two_tower"  # claimed by its array names
