"""Released checkpoints through their Hugging Face Hub mirrors, offline: small Hub
repositories built from the released-format fixtures by our converters, served by a real
HTTP server on 127.0.0.1 (tests/hub_server.py) that huggingface_hub talks to, and a
bucket that answers 403."""

import hashlib
import json
import logging
import os
import sys
import time

import numpy as np
import pytest

from conftest import RELEASED_FIXTURES, TINY
from helpers import closed_port
from hub_server import COMMIT
from vit_jax.checkpoints import formats, hub, npz, released

TI16_I21K = "augreg/Ti_16-i21k-300ep-lr_0.001-aug_none-wd_0.03-do_0.0-sd_0.0"
R_TI16_I21K = "augreg/R_Ti_16-i21k-300ep-lr_0.001-aug_none-wd_0.03-do_0.0-sd_0.0"





def assert_same_arrays(path, fixture, missing=()):
  with np.load(path) as got, np.load(fixture) as want:
    assert sorted(set(want.files) - set(got.files)) == sorted(missing)
    assert set(got.files) <= set(want.files)
    for key in got.files:
      assert got[key].dtype == want[key].dtype and np.array_equal(got[key], want[key]), key


@pytest.mark.parametrize("name, fixture, repo", [
    ("ViT-Ti_16", "vit-ti16.npz", "timm/vit_tiny_patch16_224.augreg_in21k"),
    ("R+ViT-Ti_16", "r-vit-ti16.npz", "timm/vit_tiny_r_s16_p8_224.augreg_in21k"),
], ids=["vit", "hybrid"])
def test_released_name_comes_from_its_timm_mirror_bit_identical(hub_site_and_bucket, hub_repos,
                                                                name, fixture, repo, caplog):
  hub_site, bucket = hub_site_and_bucket
  with caplog.at_level(logging.WARNING):
    path = hub.resolve(name, verbose=False)
  expected = released.local_path(released.resolve(name, local_dir=None), "checkpoints")
  assert path == expected and path.startswith(os.path.join("checkpoints", "augreg", ""))
  assert_same_arrays(path, RELEASED_FIXTURES / fixture)
  assert not caplog.records  # the bucket's weights: no exact-GELU warning
  assert bucket.requests == []
  provenance = json.loads(open(hub.provenance_path(path)).read())
  weights = hub_repos[repo]["model.safetensors"]
  assert provenance["repository"] == repo and provenance["revision"] == COMMIT
  assert provenance["bucket_file"] == released.bucket_path(released.resolve(name, local_dir=None))
  assert provenance["files"]["model.safetensors"] == {
      "sha256": hashlib.sha256(weights).hexdigest(), "bytes": len(weights)}
  assert sorted(os.listdir(os.path.dirname(path))) == sorted(
      [os.path.basename(path), os.path.basename(hub.provenance_path(path))])

  asked = len(hub_site.requests)  # a complete local copy needs no network
  assert hub.resolve(name, verbose=False) == path and len(hub_site.requests) == asked


def test_google_in21k_copy_keeps_pre_logits_without_wrong_warnings(hub_site_and_bucket, caplog):
  with caplog.at_level(logging.WARNING):
    path = hub.resolve("imagenet21k/ViT-B_16", verbose=False)
  assert path == os.path.join("checkpoints", "imagenet21k", "ViT-B_16.npz")
  assert_same_arrays(path, RELEASED_FIXTURES / "vit-ti16-prelogits.npz",
                     missing=["head/bias", "head/kernel"])  # Google's copy has no head
  assert not caplog.records  # neither 'gelu' nor eps 1e-12: they are the bucket's weights
  module, params = npz.load_npz(path, num_classes=5, pre_logits=True)
  assert module.representation_size == 192 and params["head"]["kernel"].shape == (192, 5)


@pytest.mark.parametrize("name, repo, fixture, missing", [
    ("imagenet21k/ViT-L_32", "google/vit-large-patch32-224-in21k", "vit-ti16-prelogits.npz",
     ["head/bias", "head/kernel"]),
    ("imagenet21k+imagenet2012/ViT-L_16-224", "google/vit-large-patch16-224", "vit-ti16.npz",
     []),
], ids=["L_32-in21k", "L_16-224"])  # ViTModel and ViTForImageClassification (L_16, L_32 too)
def test_google_repositories_without_safetensors_are_read_without_pytorch(
    hub_site_and_bucket, monkeypatch, name, repo, fixture, missing):
  monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` fails, as without it
  path = hub.resolve(name, verbose=False)
  assert_same_arrays(path, RELEASED_FIXTURES / fixture, missing=missing)
  provenance = json.loads(open(hub.provenance_path(path)).read())
  assert provenance["repository"] == repo and list(provenance["files"]) == [
      "config.json", "flax_model.msgpack"]
  assert hub_site_and_bucket[1].requests == []  # not the bucket, not timm's copy either


def test_flax_msgpack_converts_bit_identically_to_safetensors(hub_repos, tmp_path):
  files = hub_repos["google/vit-base-patch16-224-in21k"]  # has both, as on the Hub
  for name in ("config.json", "model.safetensors", "flax_model.msgpack"):
    (tmp_path / name).write_bytes(files[name])
  from_safetensors = formats.read_foreign(tmp_path, notes=False)
  (tmp_path / "model.safetensors").unlink()
  from_msgpack = formats.read_foreign(tmp_path, notes=False)
  assert from_msgpack.keys() == from_safetensors.keys()
  for key, value in from_safetensors.items():
    assert from_msgpack[key].dtype == value.dtype and np.array_equal(from_msgpack[key], value)
  (tmp_path / "flax_model.msgpack").write_bytes(files["flax_model.msgpack"][:1000])
  with pytest.raises(formats.FormatError, match="is not a readable flax_model.msgpack file"):
    formats.read_foreign(tmp_path)


def test_a_missing_mirror_falls_through_to_the_next(hub_site_and_bucket):
  hub_site, _ = hub_site_and_bucket
  path = hub.resolve("imagenet21k/ViT-B_32", verbose=False)
  assert any("google/vit-base-patch32-224-in21k" in r for r in hub_site.requests)
  assert json.loads(open(hub.provenance_path(path)).read())["repository"] == (
      "timm/vit_base_patch32_224.orig_in21k")
  module, _ = npz.load_npz(path)
  assert module.hidden_size == TINY["hidden_size"]


def test_bucket_403_is_one_line_naming_the_mirrors_tried(hub_site_and_bucket):
  _, bucket = hub_site_and_bucket
  with pytest.raises(hub.HubError) as error:
    hub.resolve("imagenet21k/ViT-L_16", verbose=False)
  message = str(error.value)
  assert "\n" not in message
  for part in ("Hub mirror google/vit-large-patch16-224-in21k: no repository",
               "Hub mirror timm/vit_large_patch16_224.orig_in21k: no repository",
               "gs://vit_models refuses anonymous downloads since February 2026 (HTTP 403"):
    assert part in message
  # asked once, no retries (fsspec's size probe is a HEAD, then a GET where that fails)
  assert bucket.requests == [f"{method} /vit_models/imagenet21k/ViT-L_16.npz"
                             for method in ("HEAD", "GET")]
  assert not os.path.exists("checkpoints")  # no empty family folder left behind


def test_a_file_without_mirror_names_the_nearest(hub_site_and_bucket):
  with pytest.raises(hub.HubError, match=r"no Hub mirror of imagenet21k/ViT-B_8.npz is known "
                     r"\(mirrored: augreg/B_8-i21k-"):
    hub.resolve("imagenet21k/ViT-B_8", verbose=False)


@pytest.mark.parametrize("tamper", ["truncated", "altered"])
def test_truncated_or_altered_download_is_refused_and_leaves_nothing(hub_site_and_bucket, tamper):
  hub_site, _ = hub_site_and_bucket
  hub_site.tamper["timm/vit_tiny_patch16_224.augreg_in21k/model.safetensors"] = tamper
  start = time.monotonic()
  with pytest.raises(hub.HubError) as error:
    hub.resolve(TI16_I21K, verbose=False)
  assert time.monotonic() - start < 30 and "\n" not in str(error.value)
  assert "timm/vit_tiny_patch16_224.augreg_in21k" in str(error.value)
  assert not os.path.exists("checkpoints")
  hub_site.tamper.clear()  # the next run fetches it whole
  assert_same_arrays(hub.resolve(TI16_I21K, verbose=False), RELEASED_FIXTURES / "vit-ti16.npz")


def test_offline_uses_the_hub_cache(hub_site_and_bucket, monkeypatch):
  path = hub.resolve(TI16_I21K, verbose=False)
  os.unlink(path)
  monkeypatch.setenv("HF_HUB_OFFLINE", "1")
  hub_site, bucket = hub_site_and_bucket
  asked = len(hub_site.requests)
  assert hub.resolve(TI16_I21K, verbose=False) == path
  assert len(hub_site.requests) == asked and bucket.requests == []
  with pytest.raises(hub.HubError, match="HF_HUB_OFFLINE is set and the Hub cache holds no "
                     "copy of google/vit-base-patch16-224-in21k.*the bucket was not tried"):
    hub.resolve("ViT-B_16", verbose=False)


def closed_port_url():
  return f"http://127.0.0.1:{closed_port()}"


def test_no_network_is_one_line_within_seconds(hub_site_and_bucket, monkeypatch):
  monkeypatch.setenv("HF_ENDPOINT", closed_port_url())
  monkeypatch.setenv(released.EMULATOR_ENV, closed_port_url())
  start = time.monotonic()
  with pytest.raises(hub.HubError) as error:
    hub.resolve("ViT-Ti_16", verbose=False)
  assert time.monotonic() - start < 20
  message = str(error.value)
  assert "\n" not in message and "cannot reach the Hub at http://127.0.0.1:" in message
  assert "the network is unreachable" in message  # the bucket, last
  assert not os.path.exists("checkpoints")


@pytest.mark.parametrize("name, message", [
    ("hf-hub:timm/vit_base_patch16_clip_224.openai", "is a timm vit_base_patch16_clip_224 "
     "with norm_layer=LayerNorm(eps=1e-05), pre_norm=True: vit_jax cannot compute"),
    ("hf-hub:someone/resnet", "is a timm resnet50, not one of timm's VisionTransformer"),
    ("hf-hub:facebook/deit-tiny", "model_type 'deit' is not transformers' plain ViT"),
    ("hf-hub:someone/weights-only", "someone/weights-only has no file config.json"),
    ("hf-hub:nobody/nothing", "no repository nobody/nothing on the Hub"),
    ("hf-hub:../x", "is no Hub repository name"),
    ("hf-hub:a/b/c", "is no Hub repository name"),
], ids=["clip", "not-a-vit", "deit", "no-config", "missing", "dotdot", "three-parts"])
def test_hub_names_that_are_no_vit_we_compute_are_one_line(hub_site_and_bucket, name, message):
  with pytest.raises((hub.HubError, ValueError)) as error:
    hub.resolve(name, verbose=False)
  assert message in str(error.value) and "\n" not in str(error.value)
  assert not os.path.exists("checkpoints")


def test_any_hub_vit_by_name_with_a_true_activation_note(hub_site_and_bucket, caplog):
  with caplog.at_level(logging.WARNING):
    path = hub.resolve("hf-hub:timm/vit_tiny_patch16_224.augreg2_test", verbose=False)
  assert path == os.path.join("checkpoints", "hf-hub", "timm",
                              "vit_tiny_patch16_224.augreg2_test.npz")
  assert_same_arrays(path, RELEASED_FIXTURES / "vit-ti16.npz")
  assert "exact GELU" in caplog.text  # not a bucket file: timm computes the exact GELU
  caplog.clear()
  with caplog.at_level(logging.WARNING):  # a mirror by its Hub name: the bucket's weights
    mirror = hub.resolve("hf-hub:timm/vit_tiny_patch16_224.augreg_in21k", verbose=False)
  assert not caplog.records
  assert json.loads(open(hub.provenance_path(mirror)).read())["bucket_file"] == (
      TI16_I21K + ".npz")


@pytest.mark.parametrize("name", ["imagenet21k/..%2F..%2Fx", "imagenet21k/../x",
                                  "augreg/a/b", "imagenet21k/.hidden"])
def test_a_name_is_never_a_path_out_of_the_cache(hub_site_and_bucket, tmp_path, name):
  np.savez(tmp_path / "x.npz", w=np.zeros(1))
  with pytest.raises(ValueError, match="is no released file name"):
    hub.resolve(name, verbose=False)


def test_http_urls_are_downloaded_first(hub_site_and_bucket):
  with pytest.raises(ValueError, match="fetch it first with python -m vit_jax.download "
                     "http://example.com/m.npz"):
    hub.resolve("http://example.com/m.npz")
  assert hub.resolve("gs://my-bucket/ft.npz") == "gs://my-bucket/ft.npz"  # as before


def test_load_for_inference_takes_released_and_hub_names(hub_site_and_bucket):
  module, params, size = hub.load_for_inference("ViT-Ti_16")
  assert size == (224, 224) and module.num_classes == 10
  with np.load(RELEASED_FIXTURES / "vit-ti16.npz") as want:
    np.testing.assert_array_equal(params["head"]["kernel"], want["head/kernel"])


def test_listing_covers_every_family_with_a_mirror():
  lines = hub.listing()
  assert "imagenet21k/ViT-B_16  <- google/vit-base-patch16-224-in21k (no head; pre_logits " \
         "kept), timm/vit_base_patch16_224.orig_in21k (no head, no pre_logits)" in lines
  assert lines[-1].startswith("(no head: the 21,843-class ImageNet-21k head is missing")
  assert all(line.startswith("sam/") for line in hub.listing("sam")) and hub.listing("sam")
  with pytest.raises(ValueError, match="unknown checkpoint family 'nope'"):
    hub.listing("nope")
