"""The public commands start from released names through the Hub mirror, offline: the
Hub and the closed bucket are local servers (tests/hub_server.py), reached through the
environment (HF_ENDPOINT, the storage host). main, predict, fewshot and vtab run
in-process through their command functions (the same parsing and resolution code as
`python -m`; tests/test_download.py runs the download command as a process)."""

import os

import numpy as np
from absl import flags

from conftest import RELEASED_FIXTURES, REPO
from helpers import run_in_process
from vit_jax import fewshot, main, predict
from vit_jax.families.vit import npz_layout
from vit_jax.models import posemb
from vit_jax.vtab import runner

# What the released name ViT-Ti_16 is fetched as, through timm's mirror.
TI16_AUGREG = "Ti_16-i21k-300ep-lr_0.001-aug_none-wd_0.03-do_0.0-sd_0.0.npz"


def test_main_fine_tunes_from_a_released_name_bit_identical(hub_site_and_bucket, tmp_path):
  """configs/vit_ti16.py starts from config.pretrained='ViT-Ti_16': its AugReg i21k file,
  through timm's mirror. With a zero learning rate the saved params are the start."""
  workdir = tmp_path / "run"
  done = run_in_process(
      main, f"--config={REPO}/configs/vit_ti16.py:digits", f"--workdir={workdir}",
      "--config.pretrained=ViT-Ti_16", "--config.pp.crop=32", "--config.total_steps=1",
      "--config.warmup_steps=0", "--config.base_lr=0", "--config.batch=8",
      "--config.batch_eval=120", "--config.eval_every=1", "--config.progress_every=1",
      "--config.model.scan_layers=True")  # one compiled block, not 12: the file's per-block
  # arrays are saved back in the released layout
  assert done.returncode == 0, done.stderr[-3000:]
  assert "exact GELU" not in done.stderr
  start = os.path.join("checkpoints", "augreg", TI16_AUGREG)
  assert (tmp_path / start).is_file()
  with np.load(workdir / "params.npz") as tuned, \
       np.load(RELEASED_FIXTURES / "vit-ti16.npz") as fixture:
    for key in fixture.files:
      if key.startswith("head/"):
        assert tuned[key].shape[-1] == 10  # digits: a new 10-way head
      elif key == npz_layout.POSEMB:
        expected = posemb.resize_posemb(fixture[key], (2, 2), True)
        np.testing.assert_array_equal(tuned[key], expected)
      else:
        np.testing.assert_array_equal(tuned[key], fixture[key], err_msg=key)


def test_predict_with_a_released_name(hub_site_and_bucket, tmp_path):
  from PIL import Image  # pylint: disable=import-outside-toplevel
  Image.fromarray(np.full((32, 32, 3), 200, np.uint8)).save(tmp_path / "a.png")
  done = run_in_process(predict, "--checkpoint=ViT-Ti_16", "--top_k=2", tmp_path / "a.png")
  assert done.returncode == 0, done.stderr[-3000:]
  assert done.stdout.startswith(str(tmp_path / "a.png"))
  assert os.path.isfile(os.path.join("checkpoints", "augreg", TI16_AUGREG))


def test_fewshot_with_a_released_name(hub_site_and_bucket, tmp_path, capsys):
  flag_values = flags.FlagValues()
  fewshot.define_flags(flag_values)
  argv = flag_values(["fewshot", "--checkpoint=imagenet21k/ViT-B_32", "--dataset=digits",
                      "--image_size=16", "--shots=1", "--seeds=1", "--batch_size=300"])
  fewshot.main(argv, flag_values)
  assert "32-d features, 10 classes" in capsys.readouterr().out
  assert os.path.isfile(os.path.join("checkpoints", "imagenet21k", "ViT-B_32.npz"))


def test_vtab_reads_a_hub_name_once_to_build_its_tasks(hub_site_and_bucket):
  settings = runner.model_settings("hf-hub:timm/vit_base_patch32_224.orig_in21k")
  assert settings["model.hidden_size"] == 32 and settings["model.num_layers"] == 2
  assert os.path.isfile(os.path.join("checkpoints", "hf-hub", "timm",
                                     "vit_base_patch32_224.orig_in21k.npz"))
