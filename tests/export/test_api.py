"""vit_jax.export.api's NaFlex options: what cannot be exported with --max_patches fails in
one line before anything is read or written."""

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
  with pytest.raises(ExportError, match="max_patches must be a whole number >= 1, got 0"):
    export.export(gap, str(tmp_path / "out"), to="stablehlo", max_patches=0)
