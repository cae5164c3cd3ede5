"""Released checkpoint names -> bucket URLs and local paths (no network: see test_hub)."""

import os

import pytest

from vit_jax.checkpoints import released
from vit_jax.families.vit import names as vit_names

B16 = "B_16-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.0-sd_0.0"


@pytest.mark.parametrize("name,url", [
    ("ViT-B_16", "gs://vit_models/imagenet21k/ViT-B_16.npz"),
    ("b_16", "gs://vit_models/imagenet21k/ViT-B_16.npz"),
    ("ViT-B/16", "gs://vit_models/imagenet21k/ViT-B_16.npz"),  # the paper's notation
    ("R50+ViT-B_16", "gs://vit_models/imagenet21k/R50+ViT-B_16.npz"),
    ("Ti_16",
     "gs://vit_models/augreg/Ti_16-i21k-300ep-lr_0.001-aug_none-wd_0.03-do_0.0-sd_0.0.npz"),
    ("imagenet21k/vit-l_16", "gs://vit_models/imagenet21k/ViT-L_16.npz"),
    ("imagenet21k+imagenet2012/ViT-L_16-224",
     "gs://vit_models/imagenet21k+imagenet2012/ViT-L_16-224.npz"),
    (f"augreg/{B16.lower()}.npz", f"gs://vit_models/augreg/{B16}.npz"),
    (f"augreg/{B16}--imagenet2012-steps_20k-lr_0.01-res_384",
     f"gs://vit_models/augreg/{B16}--imagenet2012-steps_20k-lr_0.01-res_384.npz"),
    ("sam/ViT-B_32", "gs://vit_models/sam/ViT-B_32.npz"),
    ("gsam/ViT-S_16", "gs://vit_models/gsam/ViT-S_16.npz"),
    ("gs://my-bucket/ft.npz", "gs://my-bucket/ft.npz"),
    ("https://example.com/x.npz", "https://example.com/x.npz"),
    ("missing/local.npz", "missing/local.npz"),  # load_npz reports it as missing
])
def test_resolve_names_and_urls(name, url, tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)
  assert released.resolve(name) == url


def test_every_released_model_but_the_gap_ones_has_an_i21k_start():
  for name in vit_names.RELEASED:  # the model configs' default config.pretrained
    if "gap" not in name:
      assert released.resolve(name, local_dir=None).startswith("gs://vit_models/")


def test_resolve_keeps_existing_local_paths_and_prefers_downloaded_copies(tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)
  (tmp_path / "mine.npz").write_bytes(b"x")
  assert released.resolve("mine.npz") == "mine.npz"
  assert released.resolve(str(tmp_path / "mine.npz")) == str(tmp_path / "mine.npz")
  local = tmp_path / "checkpoints" / "imagenet21k" / "ViT-B_16.npz"
  local.parent.mkdir(parents=True)
  local.write_bytes(b"x")
  assert released.resolve("ViT-B_16") == os.path.join("checkpoints", "imagenet21k", "ViT-B_16.npz")
  assert released.resolve("ViT-B_16", local_dir=None).startswith("gs://")


@pytest.mark.parametrize("name,message", [
    ("foo/ViT-B_16", "unknown checkpoint family 'foo'; families: imagenet21k, "
                     "imagenet21k+imagenet2012, augreg, sam, gsam"),
    ("ViT-Q_16", "unknown model name"),
    ("ViT-B_16-gap-norep", "no released ImageNet-21k checkpoint is known for ViT-B_16-gap-norep"),
])
def test_resolve_errors_are_one_line(name, message):
  with pytest.raises(ValueError, match="^[^\n]*$") as error:
    released.resolve(name)
  assert message in str(error.value)


def test_https_url_and_local_path():
  url = "gs://vit_models/imagenet21k+imagenet2012/R50+ViT-B_16.npz"
  assert released.https_url(url) == (
      "https://storage.googleapis.com/vit_models/imagenet21k+imagenet2012/R50+ViT-B_16.npz")
  assert released.https_url("/local/file.npz") == "/local/file.npz"
  for same in (url, released.https_url(url)):
    assert released.local_path(same, "ck") == os.path.join(
        "ck", "imagenet21k+imagenet2012", "R50+ViT-B_16.npz")
  assert released.local_path("https://example.com/a/b/c.npz", "ck") == os.path.join("ck", "c.npz")


def test_https_url_follows_the_storage_emulator(monkeypatch):
  monkeypatch.setenv(released.EMULATOR_ENV, "127.0.0.1:9023")
  url = released.https_url("gs://vit_models/sam/ViT-B_16.npz")
  assert url == "http://127.0.0.1:9023/vit_models/sam/ViT-B_16.npz"
  assert released.is_bucket_url(url) and released.bucket_path(url) == "sam/ViT-B_16.npz"
  assert not released.is_bucket_url("gs://other/vit_models/x.npz")


@pytest.mark.parametrize("name", ["imagenet21k/..%2F..%2Fx", "imagenet21k/../x", "augreg/a/b",
                                  "sam/.npz", "imagenet21k/x%00.npz"])
def test_a_released_name_is_a_name_never_a_path(name):
  with pytest.raises(ValueError, match="is no released file name .* never a path"):
    released.resolve(name)


@pytest.mark.parametrize("url", ["http://host/", "http://host", "http://host/a/..",
                                 "https://host/a/%2E%2E", "file:///"])
def test_urls_that_name_no_file_have_no_local_path(url):
  with pytest.raises(ValueError, match="names no file to save"):
    released.local_path(url, "ck")

