"""checkpoint_family: a family's file is told as its own, claimed without loading it or
by its arrays; a training config's pretrained file must give config.model_name's model."""

import ml_collections
import pytest

from conftest import random_params, tiny_model
from two_tower_helpers import save_tiny_lit
from vit_jax import create_model, save_npz
from vit_jax.base import errors
from vit_jax.checkpoints import checkpoint_family
from vit_jax.training import pretrained_file


@pytest.fixture(name="files", scope="module")
def fixture_files(tmp_path_factory):
  folder = tmp_path_factory.mktemp("families")
  save_npz(random_params(tiny_model(3), 16), folder / "vit.npz")
  mixer = create_model("Mixer-B_16", num_classes=3, patch_size=4, hidden_dim=8, num_blocks=1,
                       tokens_mlp_dim=4, channels_mlp_dim=8)
  save_npz(random_params(mixer, 8), folder / "mixer.npz")
  pair, _, _ = save_tiny_lit(folder)
  return {"vit": str(folder / "vit.npz"), "mixer": str(folder / "mixer.npz"), "pair": pair}


def test_a_file_is_told_by_its_family(files):
  assert checkpoint_family.of(files["vit"]).name == "vit"  # by its arrays
  assert checkpoint_family.of(files["mixer"]).name == "mixer"
  assert checkpoint_family.of(files["pair"]).name == "two_tower"  # claimed by its array names


def _config(model_name, pretrained):
  return ml_collections.ConfigDict({"model_name": model_name, "pretrained": pretrained})


@pytest.mark.parametrize("model_name, file, message", [
    ("Mixer-B_16", "vit", "is a ViT checkpoint, but config.model_name=Mixer-B_16 trains an "
                          "MLP-Mixer: start from an MLP-Mixer file (--config.pretrained="
                          "Mixer-B_16), or use a ViT config for this file (docs/python_api.md)"),
    ("ViT-S_16", "mixer", "is an MLP-Mixer checkpoint, but config.model_name=ViT-S_16 trains a "
                          "ViT: start from a ViT file (--config.pretrained=ViT-S_16), or use an "
                          "MLP-Mixer config for this file (docs/mixer.md)"),
    ("Mixer-L_16", "pair", "is a two-tower (LiT / SigLIP) checkpoint, but config.model_name="
                           "Mixer-L_16 trains an MLP-Mixer: start from an MLP-Mixer file "
                           "(--config.pretrained=Mixer-L_16), or use a ViT config for this file"),
])
def test_a_pretrained_file_of_another_family_is_one_line_before_any_data(files, model_name,
                                                                         file, message):
  """The main job's check of its files (pretrained_file.resolve) refuses it, where loading
  it failed after the data was opened, advising a model_name the config does not pass."""
  with pytest.raises(errors.InvalidInput) as raised:
    pretrained_file.resolve(_config(model_name, files[file]))
  assert str(raised.value) == f"config.pretrained={files[file]} {message}" + (
      " (docs/two_towers.md)" if file == "pair" else "")


@pytest.mark.parametrize("model_name, file", [
    ("ViT-B_16", "vit"), ("Mixer-B_16", "mixer"),
    ("ViT-B_16", "pair"),  # a pair's file gives its image tower, a ViT
    ("ViT-B_16", None)])
def test_a_file_of_the_configs_family_passes(files, model_name, file):
  checkpoint_family.check_start(_config(model_name, files.get(file)))
