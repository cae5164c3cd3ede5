"""Two-tower exports: the image and text towers as separate StableHLO and ONNX artefacts,
each reloaded in its own runtime and compared with the Flax towers at another batch than
the one verified at export; a NaFlex folder's image tower on NaFlex inputs; what cannot
work refused in one line."""

import json

import jax
import numpy as np
import onnxruntime
import pytest
from PIL import Image

import two_tower_helpers
from vit_jax import export
from vit_jax.data import naflex_patches
from vit_jax.families.two_tower import export_signature, scoring
from vit_jax.families.two_tower import npz_file as two_tower_load
from vit_jax.export.source import ExportError


@pytest.fixture(name="siglip", scope="module")
def fixture_siglip(tmp_path_factory):
  folder = tmp_path_factory.mktemp("siglip")
  model = two_tower_helpers.tiny_siglip()
  params = two_tower_helpers.random_params(model, 8)
  path = str(folder / "siglip.npz")
  two_tower_load.save_two_tower(params, path)
  (folder / "siglip.model").write_bytes(b"sentencepiece stand-in")  # copied, not read
  return path, model, params


def _truth(model, params, rows):
  rng = np.random.default_rng(5)
  images = rng.uniform(-1, 1, (rows, 32, 32, 3)).astype(np.float32)
  tokens = rng.integers(0, 50, (rows, 8)).astype(np.int32)
  zimg = jax.jit(lambda x: model.apply(params, x, method=model.embed_images))(images)
  ztxt = jax.jit(lambda t: model.apply(params, t, method=model.embed_texts))(tokens)
  return images, tokens, np.asarray(zimg), np.asarray(ztxt)


def _relative(ours, truth):
  return float(np.max(np.abs(np.asarray(ours) - truth)) / np.max(np.abs(truth)))


def test_stablehlo_towers_reload_and_match_flax(siglip, tmp_path):
  path, model, params = siglip
  result = export.export(path, str(tmp_path / "out"), to="stablehlo", log=lambda _: None)
  assert set(result.differences) == {"image_tower", "text_tower"}
  meta = json.loads((tmp_path / "out/metadata.json").read_text())
  assert meta["family"] == "siglip" and meta["batch"] == "dynamic"
  assert meta["logit_scale"] == pytest.approx(10.0) and meta["logit_bias"] is not None
  assert (tmp_path / "out" / meta["towers"]["text_tower"]["tokenizer"]).is_file()
  images, tokens, zimg, ztxt = _truth(model, params, 3)  # batch 3: not the one verified
  for tower, inputs, truth in (("image_tower", images, zimg), ("text_tower", tokens, ztxt)):
    data = (tmp_path / "out" / meta["towers"][tower]["files"]["model"]).read_bytes()
    ours = jax.export.deserialize(bytearray(data)).call(inputs)
    assert _relative(ours, truth) <= 1e-5, tower


def test_onnx_towers_run_in_onnxruntime(siglip, tmp_path):
  path, model, params = siglip
  export.export(path, str(tmp_path / "out"), to="onnx", log=lambda _: None)
  meta = json.loads((tmp_path / "out/metadata.json").read_text())
  images, tokens, zimg, ztxt = _truth(model, params, 3)
  for tower, name, inputs, truth in (("image_tower", "images", images, zimg),
                                     ("text_tower", "tokens", tokens, ztxt)):
    session = onnxruntime.InferenceSession(
        str(tmp_path / "out" / meta["towers"][tower]["files"]["model"]),
        providers=["CPUExecutionProvider"])
    (ours,) = session.run(["embeddings"], {name: inputs})
    assert _relative(ours, truth) <= 1e-4, tower
  scale, bias = meta["logit_scale"], meta["logit_bias"]
  logits = model.apply(params, zimg, ztxt, method=model.logits)
  np.testing.assert_allclose(scale * zimg @ ztxt.T + bias, logits, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("options, message", [
    (dict(to="saved_model"), "stablehlo or onnx"),
    (dict(to="stablehlo", dtype="bfloat16"), "dtype=bfloat16"),
    (dict(to="onnx", with_preprocessing=True), "with_preprocessing"),
    (dict(to="stablehlo", image_size=(32, 48)), "square")])
def test_what_cannot_work_is_refused_before_the_load(siglip, tmp_path, options, message):
  with pytest.raises(ExportError, match=message):
    export.export(siglip[0], str(tmp_path / "out"), log=lambda _: None, **options)
  assert not (tmp_path / "out").exists()


def test_a_naflex_folder_exports_its_image_tower_for_naflex_inputs(siglip, tmp_path):
  """A Siglip2Model folder is read as NaFlex at its processor's budget (256 without a
  preprocessor_config.json): its image tower takes patches, mask and grid and embeds as
  zeroshot reads images; --image_size asks for square images; ONNX refuses in one line."""
  _, model, params = siglip
  folder = two_tower_helpers.save_siglip2_folder(tmp_path / "hf2", model, params)
  export.export(folder, str(tmp_path / "out"), to="stablehlo", log=lambda _: None)
  meta = json.loads((tmp_path / "out/metadata.json").read_text())
  tower = meta["towers"]["image_tower"]
  assert meta["max_patches"] == 256 and meta["image_size"] is None
  assert tower["inputs"]["patches"]["shape"] == [None, 256, 192]
  assert set(tower["inputs"]) == {"patches", "mask", "grid"} and "patchify" in str(tower)
  paths = []
  for shape in ((30, 70), (64, 24)):
    paths.append(str(tmp_path / f"{shape[0]}.png"))
    Image.fromarray(np.random.default_rng(shape[0]).integers(0, 256, (*shape, 3), np.uint8)
                    ).save(paths[-1])
  items = [naflex_patches.patchify(np.asarray(Image.open(p)), 8, 256) for p in paths]
  inputs = {name: np.stack(part) for name, part in zip(("patches", "mask", "grid"),
                                                      zip(*items))}
  data = (tmp_path / "out" / tower["files"]["model"]).read_bytes()
  ours = jax.export.deserialize(bytearray(data)).call(inputs)
  truth = scoring.embed_naflex_files(model, params["params"], paths, 256, 4, 2)
  assert _relative(ours, truth) <= 1e-5
  square = export_signature.load(folder, image_size=32).functions[0]
  assert square.named_inputs is None and square.input_shape == (32, 32, 3)
  with pytest.raises(ExportError, match="--to=onnx cannot write .* image tower, which takes "
                                        "patches, mask, grid") as e:
    export.export(folder, str(tmp_path / "onnx"), to="onnx", log=lambda _: None)
  assert "\n" not in str(e.value) and not (tmp_path / "onnx").exists()
