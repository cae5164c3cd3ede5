"""Released Mixer files by name (gs://mixer_models and timm's Hub copies), offline: a tiny
Mixer in timm's MlpMixer layout served as `timm/mixer_b16_224.goog_in21k` by the Hub
stand-in (tests/hub_server.py), and the bucket for the files no one mirrors."""

import json
import logging
import os

import numpy as np
import pytest
from safetensors.numpy import save_file

import hub_server
from conftest import random_params
from vit_jax import create_model, download, load_npz, save_npz
from vit_jax.checkpoints import hub, released, torch_layout
from vit_jax.families.mixer import timm_layout

TINY = dict(patch_size=4, hidden_dim=16, num_blocks=2, tokens_mlp_dim=8, channels_mlp_dim=32)
REPO = "timm/mixer_b16_224.goog_in21k"


@pytest.fixture(name="mixer_file", scope="module")
def fixture_mixer_file(tmp_path_factory):
  module = create_model("Mixer-B_16", num_classes=5, **TINY)
  path = tmp_path_factory.mktemp("mixer") / "mixer.npz"
  save_npz(random_params(module, 16), path)
  return path


@pytest.fixture(name="servers", scope="module")
def fixture_servers(mixer_file):
  with np.load(mixer_file) as archive:
    state = torch_layout.to_torch(dict(archive), timm_layout.rules(), "timm")
  folder = mixer_file.parent / "timm"
  folder.mkdir()
  save_file(state, str(folder / "model.safetensors"))
  (folder / "config.json").write_text(json.dumps({
      "architecture": "mixer_b16_224", "num_classes": 5, "num_features": 16,
      "global_pool": "avg", "pretrained_cfg": {"tag": "goog_in21k"}}))
  files = hub_server.repo_files(folder)
  site = hub_server.HubServer({REPO: files, "timm/gmixer_24_224.ra3_in1k": hub_server.with_config(
      files, {"architecture": "gmixer_24_224", "num_classes": 5})})
  bucket = hub_server.HubServer(forbid=True)
  yield site, bucket
  site.close()
  bucket.close()


@pytest.fixture(name="site_and_bucket")
def fixture_site_and_bucket(servers, tmp_path, monkeypatch):
  return hub_server.use_servers(*servers, tmp_path, monkeypatch)


def test_bare_name_is_the_imagenet21k_file_from_timms_copy(site_and_bucket, mixer_file, caplog):
  _, bucket = site_and_bucket
  with caplog.at_level(logging.WARNING):
    path = hub.resolve("Mixer-B_16", verbose=False)
  assert path == os.path.join("checkpoints", "imagenet21k", "Mixer-B_16.npz")
  with np.load(path) as got, np.load(mixer_file) as want:
    assert sorted(got.files) == sorted(want.files)
    assert all(np.array_equal(got[k], want[k]) for k in want.files)  # bit for bit
  assert not caplog.records and bucket.requests == []  # Google's weights: no GELU note
  provenance = json.loads(open(hub.provenance_path(path)).read())
  assert provenance["bucket_file"] == "imagenet21k/Mixer-B_16.npz"
  assert provenance["repository"] == REPO
  module, _ = load_npz(path, num_classes=3)
  assert module.hidden_dim == 16 and module.num_classes == 3


def test_unmirrored_files_come_from_the_mixer_bucket(site_and_bucket, mixer_file, monkeypatch):
  _, bucket = site_and_bucket
  monkeypatch.setattr(bucket.server, "forbid", False)
  bucket.files["/mixer_models/gsam/Mixer-S_8.npz"] = mixer_file.read_bytes()
  path = download.download("gsam/mixer_s8", "ck", verbose=False)
  assert path == os.path.join("ck", "gsam", "Mixer-S_8.npz")
  assert "GET /mixer_models/gsam/Mixer-S_8.npz" in bucket.requests
  assert open(path, "rb").read() == mixer_file.read_bytes()


@pytest.mark.parametrize("name, url", [
    ("Mixer-L/16", "gs://mixer_models/imagenet21k/Mixer-L_16.npz"),
    ("imagenet21k/Mixer-L_16", "gs://mixer_models/imagenet21k/Mixer-L_16.npz"),
    ("imagenet1k/mixer_b16", "gs://mixer_models/imagenet1k/Mixer-B_16.npz"),
    ("sam/Mixer-B_32", "gs://mixer_models/sam/Mixer-B_32.npz"),
    ("gsam/Mixer-S_32", "gs://mixer_models/gsam/Mixer-S_32.npz"),
    ("imagenet21k/ViT-B_16", "gs://vit_models/imagenet21k/ViT-B_16.npz"),
])
def test_released_mixer_names(name, url):
  assert released.resolve(name, local_dir=None) == url
  assert released.bucket_path(url) == url.split("_models/")[1]


def test_a_mixer_without_an_imagenet21k_file_names_what_there_is():
  with pytest.raises(ValueError, match="no released ImageNet-21k file of Mixer-S_16; "
                     "released: gsam/Mixer-S_16$"):
    released.resolve("Mixer-S_16", local_dir=None)


def test_list_shows_every_released_mixer_file():
  lines = hub.listing()
  assert any(line.startswith("imagenet21k/Mixer-B_16  <- " + REPO) for line in lines)
  unmirrored = [line.split()[0] for line in lines if "no Hub mirror" in line]
  assert unmirrored == ["imagenet1k/Mixer-B_16", "imagenet1k/Mixer-L_16", "sam/Mixer-B_16",
                        "sam/Mixer-B_32", "gsam/Mixer-B_16", "gsam/Mixer-B_32",
                        "gsam/Mixer-S_16", "gsam/Mixer-S_32", "gsam/Mixer-S_8"]
  assert hub.listing("imagenet1k") == ["imagenet1k/Mixer-B_16  <- gs://mixer_models only "
                                       "(no Hub mirror)", "imagenet1k/Mixer-L_16  <- "
                                       "gs://mixer_models only (no Hub mirror)"]


def test_other_timm_mlp_models_are_refused(site_and_bucket):
  with pytest.raises(hub.HubError, match="timm gmixer_24_224 with act_layer=SiLU"):
    hub.resolve("hf-hub:timm/gmixer_24_224.ra3_in1k", verbose=False)
