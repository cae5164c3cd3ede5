"""vit_jax.export.api's NaFlex options: what cannot be exported with --max_patches fails in
one line before anything is read or written."""

import json

import pytest

from export_cases import checkpoints, naflex_checkpoint  # noqa: F401 (checkpoints: a fixture)
from vit_jax import export
from vit_jax.export.source import ExportError


@pytest.mark.parametrize("options,message", [
    (dict(to="saved_model", image_size=32), "--max_patches takes each image at its own size"),
    (dict(to="saved_model", with_preprocessing=True), "--with_preprocessing decodes to a "
     "square image; NaFlex inputs are patchified by the client"),
    (dict(to="tflite", batch=2), "--to=tflite does not support max_patches: TFLite's "
     "converter miscomputes"),
    (dict(to="onnx"), "--to=onnx does not support max_patches: jax2onnx 0.13 cannot trace"),
])
def test_naflex_options_that_cannot_work_are_one_line(tmp_path, options, message):
  out = tmp_path / "out"
  with pytest.raises(ExportError, match=message):
    export.export(naflex_checkpoint(tmp_path), str(out), max_patches=12, **options)
  assert not out.exists()


def test_naflex_needs_a_map_pooled_vit_with_a_learned_table(checkpoints, tmp_path):
  gap, _ = checkpoints["gap"]
  with pytest.raises(ExportError, match=r"gap.npz: --max_patches: NaFlex runs plain MAP-pooled "
                     r"ViTs with a learned position table .*not classifier='gap'"):
    export.export(gap, str(tmp_path / "out"), to="stablehlo", max_patches=12)
  with pytest.raises(ExportError, match=r"--max_patches=-1: pass a patch budget >= 1 \(e\.g\. "
                     r"256\), 0 for square images, or leave it out"):
    export.export(gap, str(tmp_path / "out"), to="stablehlo", max_patches=-1)


def test_a_file_trained_as_naflex_exports_as_naflex_unless_asked_for_images(tmp_path):
  """params.npz of a run at config.pp.max_patches=12 records it: without --max_patches the
  export takes NaFlex inputs at that budget (and says so), with 0 it takes images; a format
  without NaFlex says how to export images."""
  # pylint: disable=import-outside-toplevel
  from vit_jax import load_npz, save_npz
  path = str(tmp_path / "recorded.npz")
  save_npz(load_npz(naflex_checkpoint(tmp_path))[1], path, max_patches=12)
  said = []
  export.export(path, str(tmp_path / "naflex"), to="stablehlo", log=said.append)
  meta = json.loads((tmp_path / "naflex" / "metadata.json").read_text())
  assert meta["max_patches"] == 12 and said[0].endswith("NaFlex, 12 patches, from the file")
  export.export(path, str(tmp_path / "square"), to="stablehlo", max_patches=0,
                log=said.append)
  meta = json.loads((tmp_path / "square" / "metadata.json").read_text())
  assert meta["max_patches"] is None and said[1].endswith(
      "16x16 px (asked for; the file records NaFlex at 12 patches)")
  with pytest.raises(ExportError, match=r"--to=onnx does not support max_patches: .* \(the "
                     r"checkpoint records NaFlex at 12 patches: --max_patches=0 exports it "
                     r"for square images\)"):
    export.export(path, str(tmp_path / "onnx"), to="onnx")
  with pytest.raises(ExportError, match=r"--with_preprocessing decodes to a square image, and "
                     r".*recorded\.npz is read as NaFlex, 12 patches, from the file: add "
                     r"--max_patches=0 to export it on square images"):
    export.export(path, str(tmp_path / "bytes"), to="saved_model", with_preprocessing=True)
  with pytest.raises(ValueError, match=r"recorded\.npz is read as NaFlex, 12 patches, from "
                     r"the file, and --image_size asks for square images: add "
                     r"--max_patches=0 to export it so"):
    export.export(path, str(tmp_path / "sized"), to="stablehlo", image_size=32)


def test_a_budget_past_the_device_memory_is_one_line(tmp_path):
  with pytest.raises(ValueError, match=r"^--max_patches=1000000000: a batch of 2 at that "
                     r"budget needs [\d,.]+ GiB .*pass a smaller budget \(released NaFlex models "
                     r"read 256 to 1024\), or a smaller --batch$"):
    export.export(naflex_checkpoint(tmp_path), str(tmp_path / "out"), to="stablehlo",
                  max_patches=1_000_000_000, log=lambda _: None)
  assert not (tmp_path / "out").exists()
