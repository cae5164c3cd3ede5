"""Image folders: the up-front checks (missing folders, empty or unknown classes, corrupt,
unreadable or looping entries) and the eval split's folder."""

import io
import os

import pytest
from PIL import Image

from helpers import make_config, write_image
from vit_jax.base import errors
from vit_jax.data.sources import image_folder
from vit_jax.data.tf_stack import tf_pipeline


def overwrite(path, content: bytes) -> None:
  path.write_bytes(content)


DAMAGES = {  # name: (damage(root) -> None or the dataset path to open, expected message)
    "missing": (lambda root: root / "absent", "absent does not exist"),
    "empty_class": (lambda root: os.makedirs(root / "train/bird"), "bird has no .jpg"),
    "unknown_class": (lambda root: os.makedirs(root / "test/bird"),
                      "classes that train/ lacks: bird"),
    "not_an_image": (lambda root: overwrite(root / "train/dog/a.JPG", b"garbage"),
                     "corrupt image .*a.JPG: not a JPEG or PNG"),
    "truncated": (lambda root: overwrite(root / "train/cat/c.Png",
                                               (root / "train/cat/c.Png").read_bytes()[:200]),
                  "corrupt image .*c.Png: truncated"),
    "no_test": (lambda root: os.rename(root / "test", root / "other"), "neither test/ nor"),
    "no_train": (lambda root: os.rename(root / "train", root / "other"), "no train/ folder"),
}


@pytest.mark.parametrize("name", DAMAGES)
def test_image_folder_errors(folder, name):
  damage, match = DAMAGES[name]
  root = damage(folder) or folder
  with pytest.raises((ValueError, FileNotFoundError), match=match):
    tf_pipeline.open_dataset(make_config(str(root)))


def test_image_folder_uses_validation_without_test(folder):
  os.rename(folder / "test", folder / "validation")
  assert tf_pipeline.open_dataset(make_config(str(folder))).info.num_eval == 2


@pytest.mark.parametrize("where", ["train/loop", "train/cat/loop.png", "test/cat/loop.jpg"])
def test_a_symlink_loop_in_an_image_folder_is_one_line_naming_it(tmp_path, where):
  for split in ("train", "test"):
    write_image(tmp_path / split / "cat" / "a.png")
  loop = tmp_path / where
  os.symlink(loop.name, loop)  # points at itself: every stat fails with ELOOP
  with pytest.raises(errors.InvalidInput) as error:
    image_folder.directory_source(str(tmp_path))
  assert str(error.value) == (f"cannot read {loop}: Too many levels of symbolic links (a "
                              "symlink loop); fix or remove that entry of the image folder")


def test_a_dangling_link_and_an_unreadable_image_are_named(tmp_path):
  for split in ("train", "test"):
    write_image(tmp_path / split / "cat" / "a.png")
  os.symlink(tmp_path / "gone.png", tmp_path / "train" / "cat" / "b.png")
  with pytest.raises(errors.InvalidInput, match=r"cannot read .*train/cat/b.png: No such file"):
    image_folder.directory_source(str(tmp_path))
  os.remove(tmp_path / "train" / "cat" / "b.png")
  if os.geteuid() != 0:  # root reads anything
    os.chmod(tmp_path / "test" / "cat" / "a.png", 0)
    with pytest.raises(errors.InvalidInput, match=r"test/cat/a.png: Permission denied"):
      image_folder.directory_source(str(tmp_path))


def jpeg_claiming(width, height):
  """A real JPEG (PIL's, 16x16, with a 40 kB comment before its frame header, as EXIF data
  would put it) whose frame header is then set to claim width x height."""
  buffer = io.BytesIO()
  Image.new("RGB", (16, 16), "red").save(buffer, "JPEG", comment=b"c" * 40_000)
  data = bytearray(buffer.getvalue())
  frame = data.index(b"\xff\xc0") + 5  # marker, length, precision; then height, width
  assert frame > 40_000
  data[frame:frame + 4] = height.to_bytes(2, "big") + width.to_bytes(2, "big")
  return bytes(data)


def test_images_training_skips_and_huge_ones_are_named(folder, caplog):
  write_image(folder / "train/dog/g.webp", fmt="WEBP")
  write_image(folder / "train/cat/h.BMP", fmt="BMP")
  huge = folder / "train/cat/huge.png"  # a real PNG header: IHDR says 10000 x 10000
  huge.write_bytes(b"\x89PNG\r\n\x1a\n" + (13).to_bytes(4, "big") + b"IHDR"
                   + (10_000).to_bytes(4, "big") * 2 + b"\x08\x02\x00\x00\x00" + b"IEND")
  bomb = folder / "train/dog/bomb.jpg"  # a decompression bomb: a 16x16 JPEG whose frame
  bomb.write_bytes(jpeg_claiming(30_000, 20_000))  # header claims 30000 x 20000
  with caplog.at_level("WARNING", logger="vit_jax"):
    image_folder.directory_source(str(folder))
  assert f"image {huge} is 10000x10000 px: decoding it slows every step" in caplog.text
  assert f"image {bomb} is 30000x20000 px: decoding it slows every step" in caplog.text
  assert (f"{folder / 'train'}: skipping 2 image(s) that training does not read "
          f"({folder / 'train/cat/h.BMP'}, {folder / 'train/dog/g.webp'}): convert them to JPEG "
          "or PNG") in caplog.text
  assert "notes.txt" not in caplog.text  # not an image: not worth a word
