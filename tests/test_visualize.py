"""vit_jax.visualize: the figures are written and show something, and the command end to end."""

import os

import numpy as np
import pytest
from absl import flags
from PIL import Image

from conftest import RELEASED_FIXTURES, init_params, tiny_model
from vit_jax import save_npz, visualize
from vit_jax.base import storage

FIGURES = ["attention_rollout.png", "embedding_filters.png", "position_similarity.png",
           "attention_distance.png"]


def assert_not_blank(path):
  pixels = np.asarray(Image.open(path).convert("RGB"), np.float32)
  assert pixels.shape[0] > 100 and pixels.shape[1] > 100, path
  assert pixels.var() > 0, f"{path} is blank"


def test_mosaic_lays_tiles_out_row_major_with_gaps():
  tiles = np.arange(5 * 2 * 3, dtype=float).reshape(5, 2, 3)
  canvas = visualize.mosaic(tiles, columns=2)
  assert canvas.shape == (3 * 3 - 1, 2 * 4 - 1)
  np.testing.assert_array_equal(canvas[3:5, 4:7], tiles[3])
  assert np.isnan(canvas[2]).all() and np.isnan(canvas[:, 3]).all()
  assert np.isnan(canvas[6:, 4:]).all()  # no sixth tile


def test_rollout_heat_map_covers_exactly_the_image():
  """A black image under the 60% opaque map: any uncovered pixel shows the white page
  through the map (every channel >= 0.4 * 255), as the half-pixel strip along the bottom
  and right edges did when the image kept imshow's pixel-centre extent."""
  maps = np.random.RandomState(0).rand(1, 4, 4)
  fig = visualize.rollout_figure(np.full((1, 16, 16, 3), -1.0), maps, ["a.png"], stride=4)
  for ax in fig.axes:
    assert [list(image.get_extent()) for image in ax.get_images()] == (
        [[0, 16, 16, 0]] * len(ax.get_images()))
  fig.canvas.draw()
  pixels = np.asarray(fig.canvas.buffer_rgba())[..., :3]
  left, bottom, right, top = fig.axes[1].get_window_extent().extents
  height = pixels.shape[0]
  area = pixels[int(np.ceil(height - top)) + 1:int(height - bottom) - 1,
                int(np.ceil(left)) + 1:int(right) - 1]
  assert area.shape[0] > 100 and area.shape[1] > 100
  assert np.all(area.min(axis=-1) < 0.4 * 255)
  visualize.plt.close(fig)


@pytest.mark.parametrize("overrides,image_size", [
    (dict(), 16), (dict(classifier="gap", resnet_stages=(), resnet_width=0.5, patch_size=2), 32),
    (dict(classifier="map", posemb="sincos2d"), 16)])  # big_vision's variants
def test_write_figures_writes_four_non_blank_pngs(tmp_path, overrides, image_size):
  module = tiny_model(**overrides)
  params = init_params(module, image_size)
  images = np.random.RandomState(0).uniform(-1, 1, (2, image_size, image_size, 3))
  written = visualize.write_figures(module, params, images, ["a.png", "b.png"],
                                    str(tmp_path / "out"))
  assert written == [str(tmp_path / "out" / name) for name in FIGURES]
  for path in written:
    assert_not_blank(path)


def test_figures_at_a_non_square_size_of_a_square_checkpoint(tmp_path):
  """16x24 images on params made at 16 px: the position embedding is resized as the model
  resizes it (its similarity figure shows the 4x6 grid)."""
  module = tiny_model()
  images = np.random.RandomState(0).uniform(-1, 1, (2, 16, 24, 3))
  written = visualize.write_figures(module, init_params(module, 16), images, ["a", "b"],
                                    str(tmp_path / "out"))
  for path in written:
    assert_not_blank(path)


@pytest.fixture
def run(monkeypatch, capsys):
  """Calls main() in-process with freshly parsed flags; returns (exit code, stdout, stderr)."""
  def run(*argv):
    values = flags.FlagValues()
    visualize.define_flags(values)
    monkeypatch.setattr(visualize, "FLAGS", values)
    try:
      visualize.main(values(["visualize", *argv]))
      code = 0
    except SystemExit as e:
      code = e.code
    out, err = capsys.readouterr()
    return code, out, err
  return run


@pytest.fixture
def image(tmp_path):
  pixels = np.load(RELEASED_FIXTURES / "images-224.npy")[0]
  path = tmp_path / "example.png"
  Image.fromarray(np.round((pixels + 1) * 127.5).astype(np.uint8)).save(path)
  return str(path)


@pytest.mark.parametrize("checkpoint,size_flag", [
    ("vit-ti16.npz", []), ("r-vit-ti16.npz", ["--image_size=256"])])  # hybrid, resized posemb
def test_command_writes_all_figures(run, image, tmp_path, checkpoint, size_flag):
  out = tmp_path / "figures"
  code, stdout, stderr = run(f"--checkpoint={RELEASED_FIXTURES / checkpoint}",
                             f"--out={out}", *size_flag, image, image)
  assert code == 0, stderr
  assert stdout.split() == [str(out / name) for name in FIGURES]
  for name in FIGURES:
    assert_not_blank(out / name)


def test_command_errors_are_one_line(run, image, tmp_path, monkeypatch):
  fixture = RELEASED_FIXTURES / "vit-ti16.npz"
  missing = tmp_path / "nope.png"
  code, stdout, stderr = run(f"--checkpoint={fixture}", f"--out={tmp_path / 'figs'}", image,
                             str(missing))
  assert (code, stdout, stderr) == (1, "", f"error: image not found: {missing}\n")
  code, stdout, stderr = run(f"--checkpoint={fixture}", f"--out={tmp_path}", image)
  assert (code, stdout) == (1, "") and stderr.count("\n") == 1  # a folder it did not write
  assert stderr.startswith(f"error: {tmp_path} already holds files it did not write "
                           "(example.png): name a new folder for vit_jax.visualize, or pass "
                           "--overwrite to write into it")
  assert os.listdir(tmp_path) == ["example.png"]
  monkeypatch.chdir(tmp_path)
  code, stdout, stderr = run(f"--checkpoint={fixture}", "--out=-", image)
  assert (code, stdout) == (1, "") and stderr == (
      "error: '-' would be standard output, where vit_jax.visualize cannot write its folder "
      "of files: name a folder\n")
  assert os.listdir(tmp_path) == ["example.png"]  # no folder named '-'

  bad = tmp_path / "truncated.npz"
  bad.write_bytes(fixture.read_bytes()[:100_000])
  code, stdout, stderr = run(f"--checkpoint={bad}", f"--out={tmp_path / 'out'}", image)
  assert code == 1 and stdout == ""
  assert stderr.startswith(f"error: {bad} is not a valid .npz") and stderr.count("\n") == 1
  assert not os.path.exists(tmp_path / "out")


@pytest.mark.parametrize("size,message", [
    (8, "image size 8 is smaller than the model's 16 px patches (no token): use 16 or a larger "
        "multiple of 16"),
    (20000, "image size 20000 gives 1250x1250 = 1,562,500 tokens, over the limit of 16,384 "
            "(attention memory grows with their square): use at most 2048 px"),
    (100, "image size 100 is not a multiple of the model's stride 16 px: use 96 or 112")])
def test_command_checks_the_image_size_against_the_model(run, image, tmp_path, size, message):
  code, stdout, stderr = run(f"--checkpoint={RELEASED_FIXTURES / 'vit-ti16.npz'}",
                             f"--out={tmp_path / 'out'}", f"--image_size={size}", image)
  assert (code, stdout, stderr) == (1, "", f"error: {message}\n")
  assert not os.path.exists(tmp_path / "out")


def test_command_refuses_nonfinite_weights_unless_allowed(run, image, tmp_path):
  path = tmp_path / "diverged.npz"
  save_npz(init_params(tiny_model()), path)
  arrays = dict(np.load(path))
  arrays["head/kernel"][0, 0] = np.nan  # the figures do not use the head
  np.savez(path, **arrays)
  code, stdout, stderr = run(f"--checkpoint={path}", f"--out={tmp_path / 'out'}", image)
  assert (code, stdout) == (1, "") and stderr.count("\n") == 1
  assert stderr.startswith(f"error: {path} has NaN/Inf weights in 1 of 40 arrays: head/kernel "
                           "(1 NaN);")
  code, stdout, stderr = run(f"--checkpoint={path}", f"--out={tmp_path / 'out'}",
                             "--allow_nonfinite", image)
  assert code == 0, stderr
  for name in FIGURES:
    assert_not_blank(tmp_path / "out" / name)


def test_command_writes_the_figures_to_a_gs_folder(run, image, gcs):
  """--out=gs://...: each PNG is rendered in memory and uploaded whole (the emulator)."""
  out = f"gs://{gcs.bucket}/figures"
  code, stdout, stderr = run(f"--checkpoint={RELEASED_FIXTURES / 'vit-ti16.npz'}",
                             f"--out={out}", image)
  assert code == 0, stderr
  assert stdout.split() == [f"{out}/{name}" for name in FIGURES]
  for name in FIGURES:
    assert storage.read_bytes(f"{out}/{name}").startswith(b"\x89PNG")
