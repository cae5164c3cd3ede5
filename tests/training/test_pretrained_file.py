"""config.pretrained before anything slow: plan's offline check passes released and hf-hub:
names without fetching them, and names a missing local path in one line."""

import ml_collections
import pytest

import helpers

from vit_jax.checkpoints import hub, transfer
from vit_jax.training import pretrained_file


def _config(pretrained):
  return ml_collections.ConfigDict({"pretrained": pretrained})


@pytest.mark.parametrize("name", [
    None, "ViT-B_16", "augreg/S_16-i21k-300ep-lr_0.001-aug_light1-wd_0.03-do_0.0-sd_0.0",
    "imagenet21k+imagenet2012/ViT-L_16-224", "SigLIP2-B_16-224", "hf-hub:google/vit-base-patch16-224",
    "gs://some-bucket/model.npz"])
def test_names_and_urls_pass_offline_without_fetching(name, monkeypatch, tmp_path):
  monkeypatch.chdir(tmp_path)  # no checkpoints/ copy of anything
  refuse = lambda *a, **kw: pytest.fail("fetched something")
  monkeypatch.setattr(hub, "fetch_released", refuse)
  monkeypatch.setattr(hub, "download_file", refuse)
  monkeypatch.setattr(transfer, "fetch", refuse)
  pretrained_file.check_offline(_config(name))
  assert list(tmp_path.iterdir()) == []


def test_a_missing_or_wrong_local_path_is_one_line(tmp_path):
  with pytest.raises(FileNotFoundError, match=(
      rf"^config.pretrained={tmp_path}/x.npz: {tmp_path}/x.npz is not found \(check the "
      r"path, or fetch a released file with python -m vit_jax.download\)$")):
    pretrained_file.check_offline(_config(f"{tmp_path}/x.npz"))
  with pytest.raises(FileNotFoundError, match="is a directory, not an .npz file"):
    pretrained_file.check_offline(_config(str(tmp_path)))
  with pytest.raises(ValueError, match="unknown checkpoint family 'nofamily'"):
    pretrained_file.check_offline(_config("nofamily/x"))
  with pytest.raises(ValueError, match="is no Hub repository name"):
    pretrained_file.check_offline(_config("hf-hub:a/b/c"))


@pytest.mark.filterwarnings("ignore:the load_module:DeprecationWarning")  # ml_collections'
def test_a_naflex_pretrained_file_sets_the_budget_unless_asked_otherwise(monkeypatch, tmp_path):
  """--config.pp.max_patches=None (typed as the refusals advise) leaves the budget to
  config.pretrained: a NaFlex run's params.npz records it; 0 asks for square crops, N for
  another budget; a file that records none (and no file) is read as square crops."""
  # pylint: disable=import-outside-toplevel
  from conftest import random_params, tiny_model
  from vit_jax import save_npz
  module = tiny_model(num_classes=3, classifier="map")
  naflex, square = str(tmp_path / "naflex.npz"), str(tmp_path / "square.npz")
  save_npz(random_params(module, 16), naflex, max_patches=12)
  save_npz(random_params(module, 16), square)
  budget = lambda *flags: pretrained_file.with_budget(helpers.parsed_config(
      monkeypatch, "naflex_demo.py", *flags)).pp.max_patches
  assert budget("--config.pp.max_patches=None") is None
  assert budget("--config.pp.max_patches=None", f"--config.pretrained={naflex}") == 12
  assert budget(f"--config.pretrained={naflex}", "--config.pp.max_patches=0") is None
  assert budget(f"--config.pretrained={naflex}", "--config.pp.max_patches=30") == 30
  assert budget(f"--config.pretrained={square}", "--config.pp.max_patches=None") is None
  assert budget("--config.pp.max_patches=0") is None
  assert budget() == 16  # the demo's own budget (its image folder's)


def test_the_run_says_which_reading_it_took_from_the_file(tmp_path, caplog):
  # pylint: disable=import-outside-toplevel
  import logging
  from conftest import random_params, tiny_model
  from vit_jax import save_npz
  from vit_jax.training import config_defaults
  path = str(tmp_path / "naflex.npz")
  save_npz(random_params(tiny_model(num_classes=3, classifier="map"), 16), path, max_patches=12)
  config = config_defaults.get_config()
  config.pretrained = path
  with caplog.at_level(logging.INFO, logger="vit_jax"):
    assert pretrained_file.with_budget(config).pp.max_patches == 12
    config.pp.max_patches = 0
    assert pretrained_file.with_budget(config).pp.max_patches is None
  assert f"config.pretrained={path}: NaFlex, 12 patches, from the file" in caplog.text
  assert (f"config.pretrained={path}: square crops (asked for; the file records NaFlex at 12 "
          "patches)") in caplog.text
