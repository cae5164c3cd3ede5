"""Released .npz checkpoints: fixtures from independent implementations, round trips,
head surgery and bad inputs."""

import logging
import os
import zipfile

import jax
import ml_dtypes
import numpy as np
import pytest

from conftest import random_params, tiny_model
from vit_jax import load_npz, save_npz
from vit_jax.checkpoints import npz
from vit_jax.families.vit import npz_file as vit_npz_file

FIXTURE_CASES = [  # checkpoint, images, expected, image_size (fixtures README)
    ("vit-ti16.npz", "images-224.npy", "expected-vit-ti16-224.npz", None),
    ("vit-ti16.npz", "images-384.npy", "expected-vit-ti16-384.npz", 384),
    ("r-vit-ti16.npz", "images-224.npy", "expected-r-vit-ti16-224.npz", None),
    ("vit-ti16-prelogits.npz", "images-224.npy", "expected-vit-ti16-prelogits-224.npz", None),
]


def relative_error(ours, truth):
  return float(np.max(np.abs(ours - truth)) / np.max(np.abs(truth)))


@pytest.mark.parametrize("checkpoint,images,expected,image_size", FIXTURE_CASES)
@pytest.mark.parametrize("fast_path", [{"attention_impl": "softmax"},
                                       {"attention_impl": "dot_product"},
                                       {"scan_layers": True, "remat_policy": "dots"}],
                         ids=lambda o: "-".join(map(str, o.values())))
def test_fixture_logits(released_fixtures, checkpoint, images, expected, image_size,
                        fast_path):
  module, params = load_npz(released_fixtures / checkpoint, image_size=image_size,
                            **fast_path)
  truth = np.load(released_fixtures / expected)
  logits = np.asarray(jax.jit(module.apply)({"params": params},
                                            np.load(released_fixtures / images)))
  assert relative_error(logits, truth["logits"]) <= 1e-5
  if "pos_embedding" in truth:
    resized = params["Transformer"]["posembed_input"]["pos_embedding"]
    assert resized.shape == truth["pos_embedding"].shape == (1, 577, 192)
    assert relative_error(resized, truth["pos_embedding"]) <= 1e-5


@pytest.mark.parametrize("checkpoint,resnet_stages,patch,representation", [
    ("vit-ti16.npz", None, 16, None), ("r-vit-ti16.npz", (), 8, None),
    ("vit-ti16-prelogits.npz", None, 16, 192)])
def test_architecture_is_inferred_from_the_file(released_fixtures, checkpoint,
                                                resnet_stages, patch, representation):
  module, _ = load_npz(released_fixtures / checkpoint)
  assert (module.hidden_size, module.num_layers, module.num_heads, module.mlp_dim) == (
      192, 12, 3, 768)
  assert module.resnet_stages == resnet_stages and module.patch_size == patch
  assert module.representation_size == representation


def test_round_trip_keeps_arrays_and_the_released_key_set(released_fixtures, tmp_path):
  for name in ("vit-ti16.npz", "r-vit-ti16.npz", "vit-ti16-prelogits.npz"):
    original = np.load(released_fixtures / name)
    module, params = load_npz(released_fixtures / name)
    save_npz(params, tmp_path / name)
    saved = np.load(tmp_path / name)
    assert set(saved.files) == set(original.files)
    for key in original.files:  # the same shapes, GroupNorm's (1, 1, 1, C) included
      assert saved[key].shape == original[key].shape, key
      np.testing.assert_array_equal(saved[key], original[key])
    module_again, params_again = load_npz(tmp_path / name)
    assert module_again == module
    jax.tree.map(np.testing.assert_array_equal, params_again, params)


def test_scan_layers_load_stacked_and_save_per_block(released_fixtures, tmp_path):
  _, per_block = load_npz(released_fixtures / "vit-ti16.npz")
  module, stacked = load_npz(released_fixtures / "vit-ti16.npz", scan_layers=True)
  assert module.scan_layers and "encoderblock_0" not in stacked["Transformer"]
  assert stacked["Transformer"]["encoderblock"]["MlpBlock_3"]["Dense_0"]["kernel"].shape == (
      12, 192, 768)
  save_npz(stacked, tmp_path / "saved.npz")
  saved = np.load(tmp_path / "saved.npz")
  assert set(saved.files) == set(np.load(released_fixtures / "vit-ti16.npz").files)
  _, again = load_npz(tmp_path / "saved.npz")
  jax.tree.map(np.testing.assert_array_equal, again, per_block)


BF16_LOGITS_TOLERANCE = 0.03  # max|diff| / max|logit| of bfloat16 compute (8-bit mantissa)


@pytest.mark.parametrize("checkpoint,expected", [
    ("vit-ti16.npz", "expected-vit-ti16-224.npz"),
    ("r-vit-ti16.npz", "expected-r-vit-ti16-224.npz")])
def test_bfloat16_fast_path_is_within_its_documented_tolerance(released_fixtures, checkpoint,
                                                              expected):
  module, params = load_npz(released_fixtures / checkpoint, dtype=jax.numpy.bfloat16,
                            attention_impl="dot_product")
  truth = np.load(released_fixtures / expected)["logits"]
  logits = np.asarray(jax.jit(module.apply)({"params": params},
                                            np.load(released_fixtures / "images-224.npy")))
  assert relative_error(logits, truth) <= BF16_LOGITS_TOLERANCE


def test_model_name_and_native_image_size(released_fixtures):
  module, params = load_npz(released_fixtures / "vit-ti16.npz", model_name="Ti_16")
  assert npz.native_image_size(module, params) == 224
  module, params = load_npz(released_fixtures / "r-vit-ti16.npz", image_size=384)
  assert npz.native_image_size(module, params) == 384


def test_new_head_is_zero_and_pre_logits_dropped(released_fixtures):
  module, params = load_npz(released_fixtures / "vit-ti16-prelogits.npz", num_classes=7)
  assert module.num_classes == 7 and module.representation_size is None
  assert "pre_logits" not in params
  assert params["head"]["kernel"].shape == (192, 7) and not np.any(params["head"]["kernel"])
  assert not np.any(params["head"]["bias"])


def test_pre_logits_can_be_kept_with_a_new_head(released_fixtures):
  module, params = load_npz(released_fixtures / "vit-ti16-prelogits.npz", num_classes=7,
                            pre_logits=True, head_bias_init=-10.0)
  assert module.representation_size == 192 and params["head"]["kernel"].shape == (192, 7)
  np.testing.assert_array_equal(params["head"]["bias"], -10.0)


def test_same_class_count_keeps_the_head(released_fixtures):
  _, params = load_npz(released_fixtures / "vit-ti16.npz", num_classes=10)
  np.testing.assert_array_equal(params["head"]["kernel"],
                                np.load(released_fixtures / "vit-ti16.npz")["head/kernel"])


def test_model_overrides_pass_through(released_fixtures):
  module, _ = load_npz(released_fixtures / "vit-ti16.npz", dropout_rate=0.1)
  assert module.dropout_rate == 0.1


# --- bad inputs: one line, names the problem, nothing written over -------------------


def one_line(excinfo):
  message = str(excinfo.value)
  assert "\n" not in message
  return message


def test_directory_names_the_npz_files_in_it(tmp_path):
  with pytest.raises(npz.CheckpointError) as e:
    load_npz(tmp_path)
  assert one_line(e) == (f"{tmp_path} is a directory, not an .npz checkpoint: pass the path "
                         "of an .npz file, or of a Hugging Face or timm model folder (with "
                         "config.json and model.safetensors)")
  save_npz(random_params(tiny_model(), 16), tmp_path / "params.npz")
  with pytest.raises(npz.CheckpointError) as e:
    load_npz(tmp_path)
  assert one_line(e).endswith(f"pass one of its .npz files: {tmp_path / 'params.npz'}")


@pytest.mark.parametrize("params, message", [
    ([np.zeros(3)], "save_npz takes a ViT's params .* got a list"),
    ({"a": [1, 2, 3]}, "save_npz takes a ViT's params .* got a dict of 'a'")])
def test_save_npz_refuses_what_is_no_vit_params_in_one_line(tmp_path, params, message):
  with pytest.raises(ValueError, match=message):
    save_npz(params, tmp_path / "x.npz")


def with_nonfinite(tmp_path, keys, value):
  """A tiny checkpoint whose `keys` each hold one `value` (NaN or Inf); its path."""
  path = tmp_path / "diverged.npz"
  save_npz(random_params(tiny_model(), 16), path)
  arrays = dict(np.load(path))
  for key in keys:
    arrays[key].flat[0] = value
  np.savez(path, **arrays)
  return path


@pytest.mark.parametrize("value,name", [(np.nan, "NaN"), (np.inf, "Inf"), (-np.inf, "Inf")])
def test_nonfinite_weights_are_refused_unless_allowed(tmp_path, value, name):
  block = "Transformer/encoderblock_1/MlpBlock_3/Dense_0/kernel"
  path = with_nonfinite(tmp_path, ["embedding/kernel", block], value)
  with pytest.raises(npz.CheckpointError) as e:
    load_npz(path)
  assert one_line(e).startswith(
      f"{path} has NaN/Inf weights in 2 of 40 arrays: {block} (1 {name}), embedding/kernel "
      f"(1 {name}); the file is damaged or saved from a diverged run: use another checkpoint, "
      "or load it anyway with allow_nonfinite=True")
  _, params = load_npz(path, allow_nonfinite=True)
  np.testing.assert_array_equal(params["embedding"]["kernel"].flat[0], value)


def test_nonfinite_weights_are_not_saved_unless_allowed(tmp_path):
  params = random_params(tiny_model(), 16)
  params["Transformer"]["encoder_norm"]["scale"] = np.full_like(
      params["Transformer"]["encoder_norm"]["scale"], np.inf)
  path = tmp_path / "diverged.npz"
  with pytest.raises(npz.CheckpointError) as e:
    save_npz(params, path)
  assert one_line(e) == (
      f"not saving {path}: NaN/Inf weights in 1 of 40 arrays: Transformer/encoder_norm/scale "
      "(32 Inf); every loader would refuse the file (a diverged run?): save finite params, or "
      "save anyway with allow_nonfinite=True (load it back with the same option)")
  assert not path.exists()
  save_npz(params, path, allow_nonfinite=True)
  assert np.isinf(load_npz(path, allow_nonfinite=True)[1]["Transformer"]["encoder_norm"][
      "scale"]).all()


def test_nonfinite_count_and_a_replaced_head_do_not_matter(tmp_path):
  keys = ["cls", "embedding/bias", "embedding/kernel", "head/bias", "head/kernel"]
  path = with_nonfinite(tmp_path, keys, np.nan)
  with pytest.raises(npz.CheckpointError, match=r"in 5 of 40 arrays: cls \(1 NaN\), "
                     r"embedding/bias \(1 NaN\), embedding/kernel \(1 NaN\) \(\+2 more\);"):
    load_npz(path)
  path = with_nonfinite(tmp_path, ["head/kernel"], np.nan)
  _, params = load_npz(path, num_classes=3)  # fine-tuning drops the broken head
  assert not np.any(params["head"]["kernel"])


@pytest.fixture(scope="module")
def every_kind_of_array(tmp_path_factory):
  """Arrays of a tiny hybrid with a pre_logits layer: every key infer_architecture reads."""
  module = tiny_model(representation_size=8, resnet_stages=(), resnet_width=0.5, patch_size=2)
  path = tmp_path_factory.mktemp("hybrid") / "hybrid.npz"
  save_npz(random_params(module, 32), path)
  return dict(np.load(path))


MALFORMED = {
    "scalar": lambda v: np.float32(1.0), "1-D": lambda v: np.ones(3, np.float32),
    "extra axis": lambda v: v[None],
    "other rank": lambda v: v.reshape(-1) if v.ndim > 1 else v.reshape(-1, 1),
    "empty": lambda v: v[:0], "strings": lambda v: v.astype(str), "bool": lambda v: v > 0}


@pytest.mark.parametrize("key", [
    "embedding/kernel", "Transformer/encoderblock_0/MultiHeadDotProductAttention_1/query/kernel",
    "Transformer/encoderblock_0/MlpBlock_3/Dense_0/kernel", vit_npz_file.POSEMB_KEY,
    "conv_root/kernel", "head/kernel", "pre_logits/kernel", "cls",
    "Transformer/encoderblock_1/LayerNorm_2/scale"])
@pytest.mark.parametrize("malformed", MALFORMED)
def test_malformed_arrays_are_one_line_naming_the_key(every_kind_of_array, tmp_path, key,
                                                      malformed):
  arrays = dict(every_kind_of_array)
  arrays[key] = MALFORMED[malformed](arrays[key])
  np.savez(tmp_path / "malformed.npz", **arrays)
  with pytest.raises(npz.CheckpointError) as e:
    load_npz(tmp_path / "malformed.npz")
  assert key in one_line(e) and "expect" in one_line(e)


def test_missing_file(tmp_path):
  with pytest.raises(FileNotFoundError) as e:
    load_npz(tmp_path / "nope.npz")
  assert "checkpoint not found" in one_line(e) and "nope.npz" in one_line(e)


def test_truncated_file(released_fixtures, tmp_path):
  data = (released_fixtures / "vit-ti16.npz").read_bytes()
  (tmp_path / "cut.npz").write_bytes(data[: len(data) // 2])
  with pytest.raises(npz.CheckpointError) as e:
    load_npz(tmp_path / "cut.npz")
  assert "truncated or corrupt" in one_line(e)


@pytest.mark.parametrize("content", [b"PK\x03\x04 definitely not a zip", b"<html>404</html>",
                                     b""])
def test_garbage_file(tmp_path, content):
  (tmp_path / "junk.npz").write_bytes(content)
  with pytest.raises(npz.CheckpointError, match="not a valid .npz") as e:
    load_npz(tmp_path / "junk.npz")
  assert "pickle" not in str(e.value)


def test_pickled_object_is_never_loaded(tmp_path):
  np.savez(tmp_path / "evil.npz", cls=np.array([{"a": 1}], dtype=object))
  with pytest.raises(npz.CheckpointError) as e:
    load_npz(tmp_path / "evil.npz")
  assert "pickled" in one_line(e)


def test_not_a_vit_checkpoint(tmp_path):
  np.savez(tmp_path / "other.npz", weights=np.zeros(3))
  with pytest.raises(npz.CheckpointError, match="not a ViT checkpoint.*embedding/kernel"):
    load_npz(tmp_path / "other.npz")


def test_missing_and_extra_keys_are_listed(released_fixtures, tmp_path):
  arrays = dict(np.load(released_fixtures / "vit-ti16.npz"))
  del arrays["Transformer/encoder_norm/scale"]
  arrays["surprise/kernel"] = np.zeros(2, np.float32)
  np.savez(tmp_path / "odd.npz", **arrays)
  with pytest.raises(npz.CheckpointError) as e:
    load_npz(tmp_path / "odd.npz")
  assert "missing Transformer/encoder_norm/scale" in one_line(e)
  assert "unexpected surprise/kernel" in one_line(e)


def test_shape_mismatch_names_key_and_shapes(released_fixtures, tmp_path):
  """One edited array of a file whose sizes are model_name's (a whole other model's sizes:
  test_a_wrong_model_name_names_the_files_model_in_advice_that_can_be_typed)."""
  arrays = dict(np.load(released_fixtures / "vit-ti16.npz"))
  arrays["Transformer/encoder_norm/bias"] = np.zeros(384, np.float32)
  np.savez(tmp_path / "edited.npz", **arrays)
  with pytest.raises(npz.CheckpointError) as e:
    load_npz(tmp_path / "edited.npz", model_name="ViT-Ti_16")
  assert "has shape (384" in one_line(e) and "expects (192" in one_line(e)


def test_unknown_model_name(released_fixtures):
  with pytest.raises(ValueError, match="unknown model name 'ViT-Tiny_16'.*ViT-Ti_16"):
    load_npz(released_fixtures / "vit-ti16.npz", model_name="ViT-Tiny_16")


def test_image_size_not_divisible_warns_what_happens(released_fixtures, caplog):
  with caplog.at_level(logging.WARNING):
    module, params = load_npz(released_fixtures / "vit-ti16.npz", image_size=232)
  assert "not a multiple of the model's stride 16" in caplog.text
  assert params["Transformer"]["posembed_input"]["pos_embedding"].shape == (1, 197, 192)


@pytest.mark.parametrize("image_size,strict,message", [
    (8, False, "image size 8 is smaller than the model's 16 px patches (no token): use 16 or "
               "a larger multiple of 16"),
    (20000, False, "image size 20000 gives 1250x1250 = 1,562,500 tokens, over the limit of "
                   "16,384 (attention memory grows with their square): use at most 2048 px"),
    (230, True, "image size 230 is not a multiple of the model's stride 16 px: use 224 or 240"),
    (12, True, "image size 12 is smaller than the model's 16 px patches"),
])
def test_image_sizes_the_model_cannot_run_at_fail_before_any_resize(
    released_fixtures, monkeypatch, image_size, strict, message):
  def no_resize(*args):
    raise AssertionError("resized the position embedding before checking the size")
  monkeypatch.setattr(vit_npz_file.posemb, "resize_posemb", no_resize)
  with pytest.raises(npz.ImageSizeError) as e:
    load_npz(released_fixtures / "vit-ti16.npz", image_size=image_size,
             strict_image_size=strict)
  assert one_line(e).startswith(message)


def test_hybrid_stride_and_largest_allowed_size(released_fixtures):
  with pytest.raises(npz.ImageSizeError, match="of the model's stride 32 px: use 224 or 256"):
    load_npz(released_fixtures / "r-vit-ti16.npz", image_size=240, strict_image_size=True)
  module = load_npz(released_fixtures / "r-vit-ti16.npz")[0]
  npz.check_image_size(module, 4096, strict=True)  # 128 x 128 tokens: the largest grid
  with pytest.raises(npz.ImageSizeError, match="use at most 4096 px"):
    npz.check_image_size(module, (4096, 4128))


def test_save_never_leaves_a_partial_file(tmp_path):
  path = tmp_path / "kept.npz"
  params = random_params(tiny_model(), 16)
  save_npz(params, path)
  before = path.read_bytes()
  with pytest.raises(Exception):
    save_npz({"head": {"kernel": object()}}, path)
  assert path.read_bytes() == before
  assert os.listdir(tmp_path) == ["kept.npz"]
  assert zipfile.is_zipfile(path)


def test_tiny_model_round_trip_infers_a_non_zoo_architecture(tmp_path):
  module = tiny_model(classifier="gap", representation_size=8)
  params = random_params(module, 16)
  save_npz({"params": params}, tmp_path / "tiny.npz")
  loaded_module, loaded = load_npz(tmp_path / "tiny.npz")
  assert loaded_module == module
  x = np.random.default_rng(0).uniform(-1, 1, (2, 16, 16, 3)).astype(np.float32)
  np.testing.assert_allclose(jax.jit(loaded_module.apply)({"params": loaded}, x),
                             jax.jit(module.apply)({"params": params}, x), rtol=1e-6)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_half_precision_files_load_as_float32_with_a_note(released_fixtures, tmp_path, caplog,
                                                          dtype):
  """big_vision writes bfloat16 .npz files, which numpy stores as 2-byte void ('|V2')."""
  original = dict(np.load(released_fixtures / "vit-ti16.npz"))
  half = {k: v.astype(getattr(ml_dtypes, dtype) if dtype == "bfloat16" else np.float16)
          for k, v in original.items()}
  np.savez(tmp_path / "half.npz", **half)
  assert np.load(tmp_path / "half.npz")["cls"].dtype.str == ("|V2" if dtype == "bfloat16"
                                                              else "<f2")
  with caplog.at_level(logging.INFO, logger="vit_jax"):
    _, params = load_npz(tmp_path / "half.npz")
  assert f"holds {len(original)} {dtype} arrays: read as float32" in caplog.text
  assert params["cls"].dtype == np.float32
  np.testing.assert_array_equal(params["cls"], half["cls"].astype(np.float32))
  np.testing.assert_allclose(params["cls"], original["cls"], rtol=1e-2, atol=1e-2)



@pytest.mark.parametrize("key, shape", [
    ("Transformer/encoderblock_0/MlpBlock_3/Dense_0/kernel", (192, 700)),  # read for mlp_dim
    ("Transformer/encoderblock_0/MlpBlock_3/Dense_0/bias", (700,)),
    ("embedding/kernel", (16, 16, 3, 190)),  # read for the hidden size
    ("Transformer/encoderblock_0/MultiHeadDotProductAttention_1/query/kernel", (192, 4, 48)),
])
def test_a_wrong_shape_is_blamed_on_the_array_that_has_it(released_fixtures, tmp_path, key,
                                                           shape):
  arrays = dict(np.load(released_fixtures / "vit-ti16.npz"))
  arrays[key] = np.zeros(shape, np.float32)
  np.savez(tmp_path / "edited.npz", **arrays)
  with pytest.raises(npz.CheckpointError) as e:
    load_npz(tmp_path / "edited.npz")
  assert f": {key} has shape {shape}" in one_line(e)


def test_a_wrong_model_name_names_the_files_model_in_advice_that_can_be_typed(
    released_fixtures, tmp_path):
  """The fix a wrong model_name gets is the file's own name (or sizes), not 'none', which a
  run's --config.model_name cannot take."""
  ti16 = released_fixtures / "vit-ti16.npz"
  with pytest.raises(npz.CheckpointError) as raised:
    load_npz(ti16, model_name="ViT-B_16")
  assert str(raised.value) == (
      f"{ti16} holds a ViT of hidden_size 192, mlp_dim 768, num_heads 3, num_layers 12, not "
      "a ViT-B_16: pass model_name=ViT-Ti_16 (a run: --config.model_name=ViT-Ti_16), or load "
      "it without a model_name (load_npz, convert) to infer it from the file")
  assert load_npz(ti16, model_name="ViT-Ti_16")[0].hidden_size == 192  # the advice works
  with pytest.raises(npz.CheckpointError, match=(
      r"holds a ViT, not an MLP-Mixer \(Mixer-B_16\): pass model_name=ViT-Ti_16 \(a run: "
      r"--config.model_name=ViT-Ti_16\), or load it without a model_name")):
    load_npz(ti16, model_name="Mixer-B_16")
  tiny = tmp_path / "tiny.npz"  # no released name: its sizes, as config.model overrides
  save_npz(random_params(tiny_model(num_classes=3), 16), tiny)
  with pytest.raises(npz.CheckpointError, match=(
      r"not a ViT-Ti_16 with hidden_size=24: set them: --config.model.hidden_size=32 "
      r"--config.model.mlp_dim=\d+ --config.model.num_heads=\d+ --config.model.num_layers=2")):
    load_npz(tiny, model_name="ViT-Ti_16", hidden_size=24)
