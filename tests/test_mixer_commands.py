"""The commands with an MLP-Mixer checkpoint (in this process, helpers.run_in_process):
predict at its own size and at twice it (token-mixing MLPs resized), one line for a size with
no rule; visualize refuses it in one line; export writes and verifies it; fewshot probes
its pooled features; convert refuses it in one line."""

import json

import numpy as np
import pytest
from absl import flags
from PIL import Image

from conftest import random_params
from helpers import run_in_process
from vit_jax import create_model, fewshot, predict, save_npz, visualize
from vit_jax import convert as convert_command
from vit_jax.export import api
from vit_jax.vtab import runner

TINY = dict(patch_size=4, hidden_dim=16, num_blocks=2, tokens_mlp_dim=8, channels_mlp_dim=32)


@pytest.fixture(name="mixer_file", scope="module")
def fixture_mixer_file(tmp_path_factory):
  folder = tmp_path_factory.mktemp("mixer")
  module = create_model("Mixer-B_16", num_classes=3, **TINY)
  save_npz(random_params(module, 16), folder / "mixer.npz", class_names=["a", "b", "c"])
  Image.fromarray(np.random.default_rng(0).integers(0, 255, (16, 16, 3), np.uint8)).save(
      folder / "image.png")
  return folder / "mixer.npz", folder / "image.png"


def test_predict_at_its_size_and_at_twice_it(mixer_file):
  path, image = mixer_file
  for size in ("16", "32"):
    done = run_in_process(predict, f"--checkpoint={path}", f"--image_size={size}", "--top_k=3",
                          image)
    assert done.returncode == 0, done.stderr
    assert {line.split()[-1] for line in done.stdout.splitlines()[1:]} == {"a", "b", "c"}
  done = run_in_process(predict, f"--checkpoint={path}", "--image_size=24", image)
  assert done.returncode == 1 and done.stderr.strip().splitlines() == [
      f"error: {path}: image size 24 gives a 6x6 token grid, but the model's weights are tied "
      "to a 4x4 grid and take whole multiples of it only (16 px, twice that, ...): use 16 or "
      "32"]


def test_visualize_and_convert_to_timm_refuse_a_tiny_mixer_in_one_line(mixer_file, tmp_path,
                                                                      monkeypatch, capsys):
  path, image = mixer_file
  values = flags.FlagValues()  # visualize's main reads the module's FLAGS (test_visualize)
  visualize.define_flags(values)
  monkeypatch.setattr(visualize, "FLAGS", values)
  with pytest.raises(SystemExit) as ended:
    visualize.main(values(["visualize", f"--checkpoint={path}", f"--out={tmp_path / 'v'}",
                           str(image)]))
  assert ended.value.code == 1 and capsys.readouterr().err.strip().splitlines() == [
      f"error: {path} is an MLP-Mixer: it has no attention or position embedding to draw "
      "(visualize takes ViTs); python -m vit_jax.predict runs it"]
  assert not (tmp_path / "v").exists()
  done = run_in_process(convert_command, path, tmp_path / "t", "--to=timm")  # a tiny Mixer
  assert done.returncode == 1 and "timm registers Mixers S, B and L" in done.stderr
  assert len(done.stderr.strip().splitlines()) == 1 and not (tmp_path / "t").exists()


@pytest.mark.parametrize("to", ["stablehlo", "onnx"])
def test_export_writes_and_verifies_a_mixer(mixer_file, tmp_path, to):
  result = api.export(str(mixer_file[0]), str(tmp_path / to), to=to, image_size=32,
                      log=lambda _: None)
  assert result.max_relative_difference <= result.tolerance  # checked in the format's own runtime
  meta = json.loads((tmp_path / to / "metadata.json").read_text())
  assert meta["model"] == "Mixer(patch=4, width=16, depth=2)"
  assert meta["architecture"]["tokens_mlp_dim"] == 4 * 8  # resized to 8x8 patches
  assert (meta["checkpoint_image_size"], meta["image_size"]) == ([16, 16], [32, 32])


def test_fewshot_probes_the_pooled_features(mixer_file):
  done = run_in_process(fewshot, f"--checkpoint={mixer_file[0]}", "--dataset=digits",
                        "--shots=2", "--seeds=1")
  assert done.returncode == 0, done.stderr
  assert "16-d features, 10 classes" in done.stdout


@pytest.mark.parametrize("which", ["name", "file"])
def test_vtab_refuses_a_mixer_in_one_line(mixer_file, which):
  checkpoint = "Mixer-B_16" if which == "name" else str(mixer_file[0])
  with pytest.raises(ValueError, match=f"^{checkpoint} is an MLP-Mixer; vit_jax.vtab runs ViTs: "
                     r"fine-tune a Mixer on each task with python -m vit_jax.main "
                     r"--config=configs/mixer_b16.py:vtab/TASK$"):
    runner.model_settings(checkpoint)


def test_predict_and_export_refuse_naflex_for_a_mixer_in_one_line(mixer_file, tmp_path):
  """--max_patches asks for NaFlex, which runs ViTs: the family's one line (as the main job
  gives for config.pp.max_patches), not an AttributeError from deep in the model."""
  from vit_jax.export import __main__ as export_command  # pylint: disable=import-outside-toplevel
  path, image = mixer_file
  refusal = (f"error: {path} is an MLP-Mixer; NaFlex (config.pp.max_patches, --max_patches) "
             "runs ViTs only")
  done = run_in_process(predict, f"--checkpoint={path}", "--max_patches=16", image)
  assert done.returncode == 1 and done.stderr.strip().splitlines()[-1].startswith(refusal)
  assert "Traceback" not in done.stderr
  done = run_in_process(export_command, path, tmp_path / "out", "--to=stablehlo",
                        "--max_patches=16")
  assert done.returncode == 1 and done.stderr.strip().splitlines() == [
      line for line in done.stderr.strip().splitlines() if line.startswith(refusal)]
  assert not (tmp_path / "out").exists()
