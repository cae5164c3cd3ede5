"""python -m vit_jax.download: released names through their Hub mirror, then the bucket;
other URLs copied; --list; names and URLs that are no file refused. Offline: the Hub and
the bucket are local servers (tests/hub_server.py)."""

import os
import subprocess
import sys
import time

import numpy as np
import pytest

from conftest import RELEASED_FIXTURES, REPO
from vit_jax import download
from vit_jax.checkpoints import hub

TI16 = "augreg/Ti_16-i21k-300ep-lr_0.001-aug_none-wd_0.03-do_0.0-sd_0.0"




def test_released_name_from_the_mirror_once_unless_forced(hub_site_and_bucket, capsys):
  hub_site, bucket = hub_site_and_bucket
  path = download.download("ViT-Ti_16", "ck", verbose=False)
  assert path == os.path.join("ck", TI16 + ".npz")
  assert os.path.exists(hub.provenance_path(path)) and bucket.requests == []
  asked = len(hub_site.requests)
  assert download.download("ViT-Ti_16", "ck") == path
  assert len(hub_site.requests) == asked
  assert "is already downloaded (--force fetches it again)" in capsys.readouterr().err
  download.download("ViT-Ti_16", "ck", force=True, verbose=False)
  assert len(hub_site.requests) > asked


def test_the_bucket_is_tried_last_over_anonymous_https(hub_site_and_bucket, tmp_path,
                                                        monkeypatch):
  """No mirror answers for ViT-L/16: the bucket, should it serve anonymous downloads
  again, does."""
  _, bucket = hub_site_and_bucket
  monkeypatch.setattr(bucket.server, "forbid", False)
  source = tmp_path / "L16.npz"
  np.savez(source, w=np.zeros(3, np.float32))
  bucket.files["/vit_models/imagenet21k/ViT-L_16.npz"] = source.read_bytes()
  path = download.download("imagenet21k/ViT-L_16", "ck", verbose=False)
  assert "GET /vit_models/imagenet21k/ViT-L_16.npz" in bucket.requests
  assert open(path, "rb").read() == source.read_bytes()


@pytest.mark.parametrize("url", ["http://127.0.0.1:9/", "http://127.0.0.1:9/a/..",
                                 "http://127.0.0.1:9"])
@pytest.mark.parametrize("force", [False, True])
def test_a_url_without_file_name_is_refused_and_writes_nothing(tmp_path, url, force):
  (tmp_path / "dir").mkdir()
  before = sorted(os.listdir(tmp_path.parent))
  with pytest.raises(ValueError, match="names no file to save"):
    download.download(url, str(tmp_path / "dir"), force=force, verbose=False)
  assert os.listdir(tmp_path / "dir") == [] and sorted(os.listdir(tmp_path.parent)) == before


def run_download(*args, cwd, **env):
  return subprocess.run([sys.executable, "-m", "vit_jax.download", *args], cwd=cwd,
                        env={**os.environ, "PYTHONPATH": str(REPO), **env},
                        capture_output=True, text=True, timeout=120)


def test_download_command_online_then_offline_from_the_cache(hub_servers, tmp_path):
  hub_site, bucket = hub_servers
  env = dict(HF_ENDPOINT=hub_site.url, STORAGE_EMULATOR_HOST=bucket.url,
             HF_HUB_CACHE=str(tmp_path / "hf_cache"))
  done = run_download("hf-hub:timm/vit_tiny_patch16_224.augreg_in21k", "--dir=ck",
                      cwd=tmp_path, **env)
  assert done.returncode == 0, done.stderr
  path = tmp_path / "ck" / "hf-hub" / "timm" / "vit_tiny_patch16_224.augreg_in21k.npz"
  assert done.stdout.strip() == os.path.relpath(path, tmp_path)
  with np.load(path) as got, np.load(RELEASED_FIXTURES / "vit-ti16.npz") as want:
    assert all(np.array_equal(got[key], want[key]) for key in want.files)

  # The same weights by their released name, with HF_HUB_OFFLINE: from the Hub cache.
  asked = len(hub_site.requests)
  done = run_download(TI16, "--dir=ck", cwd=tmp_path, HF_HUB_OFFLINE="1", **env)
  assert done.returncode == 0, done.stderr
  assert done.stdout.strip() == os.path.join("ck", TI16 + ".npz")
  assert len(hub_site.requests) == asked

  failed = run_download("imagenet21k/ViT-B_16", "--dir=ck", cwd=tmp_path, HF_HUB_OFFLINE="1",
                        **env)
  assert failed.returncode == 1 and "Traceback" not in failed.stderr
  [line] = failed.stderr.strip().splitlines()
  assert line.startswith("error: cannot fetch imagenet21k/ViT-B_16.npz: Hub mirror google/")


def test_download_command_refuses_a_hub_repository_that_is_no_vit(hub_servers, tmp_path):
  hub_site, bucket = hub_servers
  start = time.monotonic()
  failed = run_download("hf-hub:someone/resnet", "--dir=ck", cwd=tmp_path,
                        HF_ENDPOINT=hub_site.url, STORAGE_EMULATOR_HOST=bucket.url,
                        HF_HUB_CACHE=str(tmp_path / "hf_cache"))
  assert failed.returncode == 1 and time.monotonic() - start < 60
  assert failed.stderr.strip().splitlines() == [
      "error: someone/resnet is a timm resnet50, not one of timm's VisionTransformer or "
      "MlpMixer models that vit_jax computes (hf-hub: takes plain ViTs, their R26/R50 "
      "hybrids and the original's Mixers)"]
  assert not (tmp_path / "ck").exists()


def test_list_command(tmp_path):
  done = run_download("--list", "sam", cwd=tmp_path)
  assert done.returncode == 0, done.stderr
  assert done.stdout.splitlines() == [
      "sam/ViT-B_16  <- timm/vit_base_patch16_224.sam_in1k",
      "sam/ViT-B_32  <- timm/vit_base_patch32_224.sam_in1k",
      "sam/Mixer-B_16  <- gs://mixer_models only (no Hub mirror)",
      "sam/Mixer-B_32  <- gs://mixer_models only (no Hub mirror)"]
