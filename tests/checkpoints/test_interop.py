"""Conversions to and from timm and Hugging Face transformers
(vit_jax.checkpoints.format_conversion).

Without PyTorch: the written safetensors files have timm's / transformers' documented key
names and shapes, configs say what makes them compute our function, round trips are
bit-identical, and unfaithful conversions are refused. The libraries themselves computing
our logits: test_interop_torch.py.
"""

import functools
import json
import os
import subprocess
import sys

import jax
import ml_dtypes
import numpy as np
import pytest
from flax import traverse_util
from safetensors import safe_open
from safetensors.numpy import load_file, save_file

from conftest import REPO, TINY, init_params, random_params, tiny_model
from helpers import run_in_process
from interop_files import IMAGE, images, logits, shapes, tiny_file
from vit_jax import CheckpointError, load_npz, read_class_names, save_npz
from vit_jax import convert as convert_command
from vit_jax.base import no_clobber
from vit_jax.checkpoints import format_conversion, torch_layout
from vit_jax.families.vit import timm_layout
from vit_jax.models import family_registry
from vit_jax.training.runs import outputs

D, LAYERS, PATCH = TINY["hidden_size"], TINY["num_layers"], TINY["patch_size"]


def block_keys(template, pairs):
  return {template.format(i=i, name=name): shape for i in range(LAYERS)
          for name, shape in pairs.items()}


# timm's VisionTransformer state dict (timm/models/vision_transformer.py), tiny sizes.
TIMM_BLOCK = {"norm1.weight": (D,), "norm1.bias": (D,), "attn.qkv.weight": (3 * D, D),
              "attn.qkv.bias": (3 * D,), "attn.proj.weight": (D, D), "attn.proj.bias": (D,),
              "norm2.weight": (D,), "norm2.bias": (D,), "mlp.fc1.weight": (64, D),
              "mlp.fc1.bias": (64,), "mlp.fc2.weight": (D, 64), "mlp.fc2.bias": (D,)}
TIMM_TOP = {"patch_embed.proj.weight": (D, 3, PATCH, PATCH), "patch_embed.proj.bias": (D,),
            "norm.weight": (D,), "norm.bias": (D,), "head.weight": (5, D), "head.bias": (5,)}
TIMM_MAP = {"attn_pool.latent": (1, 1, D), "attn_pool.q.weight": (D, D), "attn_pool.q.bias": (D,),
            "attn_pool.kv.weight": (2 * D, D), "attn_pool.kv.bias": (2 * D,),
            "attn_pool.proj.weight": (D, D), "attn_pool.proj.bias": (D,),
            "attn_pool.norm.weight": (D,), "attn_pool.norm.bias": (D,),
            "attn_pool.mlp.fc1.weight": (64, D), "attn_pool.mlp.fc1.bias": (64,),
            "attn_pool.mlp.fc2.weight": (D, 64), "attn_pool.mlp.fc2.bias": (D,)}
# transformers' ViTForImageClassification as its files store it (modeling_vit.py).
HF_BLOCK = {"layernorm_before.weight": (D,), "layernorm_before.bias": (D,),
            **{f"attention.attention.{n}.{p}": (D, D) if p == "weight" else (D,)
               for n in ("query", "key", "value") for p in ("weight", "bias")},
            "attention.output.dense.weight": (D, D), "attention.output.dense.bias": (D,),
            "layernorm_after.weight": (D,), "layernorm_after.bias": (D,),
            "intermediate.dense.weight": (64, D), "intermediate.dense.bias": (64,),
            "output.dense.weight": (D, 64), "output.dense.bias": (D,)}
HF_TOP = {"vit.embeddings.cls_token": (1, 1, D), "vit.embeddings.position_embeddings": (1, 17, D),
          "vit.embeddings.patch_embeddings.projection.weight": (D, 3, PATCH, PATCH),
          "vit.embeddings.patch_embeddings.projection.bias": (D,),
          "vit.layernorm.weight": (D,), "vit.layernorm.bias": (D,),
          "classifier.weight": (5, D), "classifier.bias": (5,)}


@pytest.mark.parametrize("classifier,extra", [
    ("token", {"cls_token": (1, 1, D), "pos_embed": (1, 17, D)}),
    ("gap", {"pos_embed": (1, 16, D)}),
    ("map", {"pos_embed": (1, 16, D), **TIMM_MAP})])
def test_timm_names_shapes_and_create_model_arguments(tmp_path, classifier, extra):
  lines = format_conversion.convert(tiny_file(tmp_path, classifier=classifier), tmp_path / "timm",
                          to="timm")
  assert shapes(tmp_path / "timm/model.safetensors") == {
      **block_keys("blocks.{i}.{name}", TIMM_BLOCK), **TIMM_TOP, **extra}
  config = json.loads((tmp_path / "timm/config.json").read_text())
  assert config["architecture"] == "vit_base_patch16_224"  # a registered name, then sizes
  expected_args = dict(img_size=16, patch_size=PATCH, embed_dim=D, depth=LAYERS, num_heads=2,
                       mlp_ratio=2.0, num_classes=5, act_layer="gelu_tanh",
                       global_pool={"gap": "avg"}.get(classifier, classifier),
                       class_token=classifier == "token")
  if classifier == "gap":
    expected_args["fc_norm"] = False
  assert config["model_args"] == expected_args
  assert config["pretrained_cfg"]["mean"] == config["pretrained_cfg"]["std"] == [0.5] * 3
  assert any("timm.create_model('local-dir:" in line for line in lines)


def test_hf_names_shapes_and_configs(tmp_path):
  format_conversion.convert(tiny_file(tmp_path), tmp_path / "hf", to="hf")
  assert shapes(tmp_path / "hf/model.safetensors") == {
      **block_keys("vit.encoder.layer.{i}.{name}", HF_BLOCK), **HF_TOP}
  config = json.loads((tmp_path / "hf/config.json").read_text())
  assert config["architectures"] == ["ViTForImageClassification"]
  assert (config["hidden_act"], config["layer_norm_eps"], config["num_attention_heads"],
          config["intermediate_size"], config["image_size"], len(config["id2label"])) == (
              "gelu_pytorch_tanh", 1e-6, 2, 64, 16, 5)
  pre = json.loads((tmp_path / "hf/preprocessor_config.json").read_text())
  assert (pre["image_mean"], pre["image_std"], pre["size"], pre["resample"]) == (
      [0.5] * 3, [0.5] * 3, {"height": 16, "width": 16}, 2)
  assert pre["rescale_factor"] == 1 / 255


def test_names_of_the_real_models():
  for name, size, expected in [("ViT-B_16", 384, "vit_base_patch16_384"),
                               ("ViT-B_16", 224, "vit_base_patch16_224"),
                               ("ViT-L_16", 512, "vit_large_patch16_224"),
                               ("R50+ViT-B_16", 384, "vit_base_r50_s16_384"),
                               ("R+ViT-Ti_16", 224, "vit_tiny_r_s16_p8_224"),
                               ("R26+ViT-S_32", 384, "vit_small_r26_s32_384")]:
    timm_name, args = timm_layout.model_name_and_args(family_registry.architecture(name), 1000,
                                                      (size, size))
    assert (timm_name, args["img_size"]) == (expected, size)


@pytest.mark.parametrize("overrides", [
    dict(), dict(classifier="gap"), dict(classifier="map"), dict(representation_size=8)])
def test_npz_timm_npz_and_npz_hf_npz_are_bit_identical(tmp_path, overrides):
  src = tiny_file(tmp_path, **overrides)
  original = dict(np.load(src))
  names = [f"class {i}" for i in range(original["head/kernel"].shape[-1])]
  save_npz(load_npz(src)[1], src, class_names=names)  # the same arrays, named classes
  targets = ["timm", "hf"] if overrides.get("classifier", "token") == "token" else ["timm"]
  pre_logits = {"timm": "drop", "hf": "pooler"} if overrides.get("representation_size") else {}
  for to in targets:
    format_conversion.convert(src, tmp_path / to, to=to, pre_logits=pre_logits.get(to))
    format_conversion.convert(tmp_path / to, tmp_path / f"back-{to}.npz")
    back = dict(np.load(tmp_path / f"back-{to}.npz"))
    kept = {k: v for k, v in original.items() if k in back}
    assert set(original) - set(back) <= {"head/kernel", "head/bias", "pre_logits/kernel",
                                         "pre_logits/bias"}
    jax.tree.map(np.testing.assert_array_equal, back, kept)
    if to == "hf" and "head/kernel" in back:  # id2label carries the names, both ways
      config = json.loads((tmp_path / "hf" / "config.json").read_text())
      assert list(config["id2label"].values()) == names
      assert read_class_names(tmp_path / "back-hf.npz") == names
    # and again to the library: the same tensors, bit for bit
    format_conversion.convert(tmp_path / f"back-{to}.npz", tmp_path / f"again-{to}", to=to,
                    pre_logits=pre_logits.get(to))
    jax.tree.map(np.testing.assert_array_equal,
                 load_file(str(tmp_path / f"again-{to}/model.safetensors")),
                 load_file(str(tmp_path / f"{to}/model.safetensors")))


def test_hybrid_rules_round_trip():
  """Our stem arrays -> timm ResNetV2 names -> ours, bit-identical, for every kind of array
  (timm builds only its own stems, so this 2-stage one goes through the rules alone)."""
  module = tiny_model(resnet_stages=(2, 1), patch_size=1)
  flat = traverse_util.flatten_dict(random_params(module, 32), sep="/")
  state = torch_layout.to_torch(flat, timm_layout.rules(), "timm")
  assert state["patch_embed.backbone.stem.conv.weight"].shape == (64, 3, 7, 7)
  assert state["patch_embed.backbone.stages.1.blocks.0.downsample.conv.weight"].shape == (
      512, 256, 1, 1)
  assert state["patch_embed.backbone.stages.0.blocks.1.norm3.weight"].shape == (256,)
  back = torch_layout.from_torch(state, timm_layout.rules(), 2, "timm")
  jax.tree.map(np.testing.assert_array_equal, back, flat)


def test_load_npz_reads_safetensors_and_folders_directly(tmp_path):
  src = tiny_file(tmp_path, classifier="map")
  format_conversion.convert(src, tmp_path / "one.safetensors")
  format_conversion.convert(src, tmp_path / "folder", to="timm")
  x = images()
  truth = logits(src, x)
  for path in (tmp_path / "one.safetensors", tmp_path / "folder"):
    np.testing.assert_array_equal(logits(path, x), truth)
  module, params = load_npz(tmp_path / "folder", num_classes=3, image_size=24)  # fine-tuning
  assert module.classifier == "map" and params["head"]["kernel"].shape == (D, 3)


def test_sincos2d_becomes_a_table_of_the_same_values(tmp_path):
  src = tiny_file(tmp_path, classifier="gap", posemb="sincos2d")
  lines = format_conversion.convert(src, tmp_path / "timm", to="timm", image_size=IMAGE)
  assert any("sincos2d position embedding was written as a table" in line for line in lines)
  format_conversion.convert(tmp_path / "timm", tmp_path / "back.npz")
  np.testing.assert_allclose(logits(tmp_path / "back.npz", images()), logits(src, images()),
                             rtol=1e-6, atol=1e-6)


def resave(original, path, state):
  """state written to path with original's metadata (the timm config our converter
  stores there, which holds the head count)."""
  with safe_open(str(original), "numpy") as f:
    save_file(state, str(path), f.metadata())


def test_half_precision_safetensors_read_as_float32(tmp_path):
  format_conversion.convert(tiny_file(tmp_path), tmp_path / "f32.safetensors")
  state = load_file(str(tmp_path / "f32.safetensors"))
  resave(tmp_path / "f32.safetensors", tmp_path / "bf16.safetensors",
         {k: v.astype(ml_dtypes.bfloat16) for k, v in state.items()})
  _, params = load_npz(tmp_path / "bf16.safetensors")
  assert params["cls"].dtype == np.float32
  np.testing.assert_allclose(params["cls"], state["cls_token"], rtol=1e-2)


def test_pre_logits_is_refused_unless_told_what_to_do(tmp_path):
  src = tiny_file(tmp_path, representation_size=8)
  for to in ("timm", "hf"):
    with pytest.raises(format_conversion.ConversionError, match="has a pre_logits layer .* pass "
                       "--pre_logits=drop .* --pre_logits=pooler"):
      format_conversion.convert(src, tmp_path / to, to=to)
  with pytest.raises(format_conversion.ConversionError,
                     match="timm's VisionTransformer does not have"):
    format_conversion.convert(src, tmp_path / "t", to="timm", pre_logits="pooler")
  format_conversion.convert(src, tmp_path / "timm", to="timm", pre_logits="drop")
  assert json.loads((tmp_path / "timm/config.json").read_text())["model_args"]["num_classes"] == 0
  assert "head.weight" not in load_file(str(tmp_path / "timm/model.safetensors"))
  format_conversion.convert(src, tmp_path / "hf", to="hf", pre_logits="pooler")
  assert shapes(tmp_path / "hf/model.safetensors")["pooler.dense.weight"] == (8, D)
  assert json.loads((tmp_path / "hf/config.json").read_text())["architectures"] == ["ViTModel"]


@pytest.mark.parametrize("overrides,to,message", [
    (dict(classifier="gap"), "hf", "always classifies a class token.*--to=timm"),
    (dict(classifier="map"), "hf", "always classifies a class token"),
    (dict(resnet_stages=(), patch_size=1), "hf", "no ViT with a ResNet stem"),
    (dict(resnet_stages=(1,), patch_size=1), "timm", r"timm builds ResNetV2 stems of stages "
                                                      r"\(\), \(2, 2, 2, 2\).* this hybrid has "
                                                      r"stages \(1,\)"),
])
def test_conversions_no_library_computes_are_refused(tmp_path, overrides, to, message):
  with pytest.raises(format_conversion.ConversionError, match=message):
    format_conversion.convert(tiny_file(tmp_path, **overrides), tmp_path / "out", to=to)


def test_foreign_files_that_are_no_vit_say_what_they_hold(tmp_path):
  format_conversion.convert(tiny_file(tmp_path, classifier="gap"), tmp_path / "gap.safetensors")
  state = load_file(str(tmp_path / "gap.safetensors"))
  resave(tmp_path / "gap.safetensors", tmp_path / "fc.safetensors",
         {**state, "fc_norm.weight": np.ones(D, np.float32)})
  with pytest.raises(CheckpointError, match="vit_jax has no place for these timm arrays: "
                     r"fc_norm.weight \(a LayerNorm after pooling"):
    load_npz(tmp_path / "fc.safetensors")
  save_file({"conv1.weight": np.ones((2, 3, 1, 1), np.float32)}, str(tmp_path / "r.safetensors"))
  with pytest.raises(CheckpointError, match=r"neither a timm VisionTransformer nor a Hugging "
                     r"Face ViT state dict: it holds conv1. \(1 arrays\)"):
    load_npz(tmp_path / "r.safetensors")
  (tmp_path / "junk.safetensors").write_bytes(b"\x00" * 5)
  with pytest.raises(CheckpointError, match="not a readable .safetensors file"):
    load_npz(tmp_path / "junk.safetensors")


def test_command(tmp_path):
  """One conversion as a process (the command line), the refusals in this process through
  the command's flags and vit_jax.base.cli's endings."""
  src = tiny_file(tmp_path)
  done = subprocess.run([sys.executable, "-m", "vit_jax.convert", str(src), str(tmp_path / "hf"),
                         "--to=hf"], cwd=REPO, capture_output=True, text=True, check=False)
  assert done.returncode == 0, done.stderr
  assert "wrote transformers ViTForImageClassification" in done.stdout
  run = functools.partial(run_in_process, convert_command)
  refused = run(src, tmp_path / "out")
  assert refused.returncode == 1 and refused.stderr.count("\n") == 1
  assert "cannot tell the target format" in refused.stderr
  usage = run(src)
  assert usage.returncode == 2 and "pass SRC and DST" in usage.stderr
  workdir = tmp_path / "run"  # a finished run's workdir is never converted into
  workdir.mkdir()
  outputs.write_final(load_npz(src)[1], {"eval/accuracy": 0.5}, str(workdir))
  (workdir / "config.json").write_text('{"base_lr": 0.1}')
  before = {p.name: p.read_bytes() for p in workdir.iterdir()}
  refused = run(src, workdir, "--to=hf")
  assert refused.returncode == 1 and refused.stderr.count("\n") == 1, refused.stderr
  assert "already holds files it did not write" in refused.stderr
  assert "--overwrite" in refused.stderr
  assert {p.name: p.read_bytes() for p in workdir.iterdir()} == before
  refused = run(src, tmp_path / "hf" / "config.json" / "x.npz")
  assert refused.returncode == 1 and refused.stderr.count("\n") == 1, refused.stderr
  assert "config.json is a file, not a folder" in refused.stderr
  format_conversion.convert(src, tmp_path / "hf", to="hf")  # its own earlier output: rewritten
  format_conversion.convert(src, tmp_path / "copy.npz")
  with pytest.raises(no_clobber.OutputExistsError, match="copy.npz already exists"):
    format_conversion.convert(src, tmp_path / "copy.npz")
  format_conversion.convert(src, tmp_path / "copy.npz", overwrite=True)
  format_conversion.convert(src, workdir, to="hf", overwrite=True)


def test_a_conversion_into_a_destination_being_written_fails_at_once(tmp_path):
  """Another process holds DST (a real flock, util-linux's flock(1) standing in for a
  conversion that is still writing); once SIGKILL ends it, its lock holds nothing back."""
  src, dst, lock = tiny_file(tmp_path), tmp_path / "hf", tmp_path / ".hf.lock"
  lock.touch()
  holder = subprocess.Popen(["flock", "--exclusive", "--no-fork", str(lock), "sleep", "60"])
  try:
    while not subprocess.run(["flock", "--nonblock", str(lock), "true"]).returncode:
      assert holder.poll() is None
    refused = run_in_process(convert_command, src, dst, "--to=hf")
  finally:
    holder.kill()
    holder.wait()
  assert refused.returncode == 1 and refused.stderr == (
      f"error: {dst} is being written by another process right now: wait until it ends (then "
      "rerun to replace its output, or use it) or name another destination for "
      "vit_jax.convert\n")
  assert not dst.exists()
  done = run_in_process(convert_command, src, dst, "--to=hf")
  assert done.returncode == 0 and (dst / "config.json").exists(), done.stderr
  assert sorted(os.listdir(tmp_path)) == ["hf", src.name]


@pytest.mark.parametrize("dst, to, message", [
    ("out.NPZ", None, None),  # suffixes in any case
    ("w.SafeTensors", None, None),
    ("folder", "npz", "is a directory and --to=npz writes one file"),
    ("file.npz", "hf", "--to=hf writes a model folder, and .* is a file: name a folder"),
    ("w.safetensors", "hf", "--to=hf writes a model folder, and .* is a file name"),
    ("model.pth", "timm", "is a file name: name a folder \\(or a .safetensors file"),
])
def test_destination_must_fit_the_target(tmp_path, dst, to, message):
  (tmp_path / "folder").mkdir()
  (tmp_path / "file.npz").write_bytes(b"")
  src = tiny_file(tmp_path)
  if message is None:
    format_conversion.convert(src, tmp_path / dst, to=to)
    assert (tmp_path / dst).is_file()
    return
  with pytest.raises(format_conversion.ConversionError, match=message):
    format_conversion.convert(src, tmp_path / dst, to=to)
  assert (tmp_path / "file.npz").read_bytes() == b"" and not os.listdir(tmp_path / "folder")


def test_a_model_without_head_saves_and_loads(tmp_path):
  module = tiny_model(num_classes=0)
  params = init_params(module, IMAGE)
  assert params["head"]["kernel"].shape[-1] == 0
  save_npz(params, tmp_path / "features.npz")
  assert not any(key.startswith("head/") for key in np.load(tmp_path / "features.npz"))
  loaded, new = load_npz(tmp_path / "features.npz", num_classes=4)
  assert new["head"]["kernel"].shape == (TINY["hidden_size"], 4)
  np.testing.assert_array_equal(new["embedding"]["kernel"], params["embedding"]["kernel"])


def test_training_accepts_model_folders_as_pretrained(tmp_path):
  import ml_collections  # pylint: disable=import-outside-toplevel
  from vit_jax.training import pretrained_file  # pylint: disable=import-outside-toplevel
  format_conversion.convert(tiny_file(tmp_path), tmp_path / "hf", to="hf")
  pretrained_file.resolve(ml_collections.ConfigDict({"pretrained": str(tmp_path / "hf")}))
  (tmp_path / "empty").mkdir()
  with pytest.raises(FileNotFoundError, match="a directory, not an .npz file or a model folder"):
    pretrained_file.resolve(ml_collections.ConfigDict({"pretrained": str(tmp_path / "empty")}))


def test_pytorch_files_without_pytorch_say_how_to_read_them(tmp_path, monkeypatch):
  (tmp_path / "model.pth").write_bytes(b"PK\x03\x04")
  monkeypatch.setitem(sys.modules, "torch", None)  # import torch fails
  with pytest.raises(CheckpointError, match=r"model.pth is a PyTorch file, and reading one "
                     r"needs PyTorch \(pip install torch\); or convert it to .safetensors"):
    load_npz(tmp_path / "model.pth")


@pytest.mark.parametrize("to, edit, message", [
    ("hf", {"hidden_size": 768}, "hidden_size 768 but the weights have 32"),
    ("hf", {"num_hidden_layers": 12, "patch_size": 16},
     "num_hidden_layers 12 but the weights have 2; patch_size 16 but the weights have 4"),
    ("hf", {"image_size": 224}, "image_size 224 but the weights have 16"),
    ("timm", {"model_args": {"depth": 6}}, "model_args.depth 6 but the weights have 2"),
    ("timm", {"model_args": {"img_size": 224}}, "model_args.img_size 224 but the weights "
     "have 16"),
    ("hf", {"id2label": {"0": "cat", "1": "dog", "2": "emu"}},
     "architectures ViTForImageClassification with num_labels 3 but the weights have 5"),
])
def test_a_config_that_contradicts_its_weights_is_refused(tmp_path, to, edit, message):
  format_conversion.convert(tiny_file(tmp_path), tmp_path / to, to=to)
  config_path = tmp_path / to / "config.json"
  config = json.loads(config_path.read_text())
  model_args = {**config.get("model_args", {}), **edit.pop("model_args", {})}
  config_path.write_text(json.dumps({**config, **edit, "model_args": model_args}))
  with pytest.raises(CheckpointError) as error:
    load_npz(tmp_path / to)
  assert str(error.value).startswith(f"{tmp_path / to} its config.json contradicts its weights")
  assert message in str(error.value) and "\n" not in str(error.value)


def test_the_head_count_stays_the_configs(tmp_path):
  format_conversion.convert(tiny_file(tmp_path), tmp_path / "hf", to="hf")
  config_path = tmp_path / "hf" / "config.json"
  config_path.write_text(json.dumps({**json.loads(config_path.read_text()),
                                     "num_attention_heads": 4}))
  module, _ = load_npz(tmp_path / "hf")
  assert module.num_heads == 4


def test_a_run_workdir_given_as_a_model_folder_names_its_params_npz(tmp_path):
  save_npz(init_params(tiny_model()), tmp_path / "params.npz")
  (tmp_path / "config.json").write_text('{"model_name": "ViT-Ti_16"}')  # the run's config
  with pytest.raises(ValueError, match="is a vit_jax run's workdir, not a model folder: pass "
                     f"{tmp_path / 'params.npz'}"):
    load_npz(tmp_path)


def test_npz_to_npz_keeps_a_naflex_budget(tmp_path):
  """convert --to=npz (another image size) writes the budget a NaFlex run's file records, so
  every tool still reads the copy as NaFlex."""
  # pylint: disable=import-outside-toplevel
  from vit_jax.checkpoints.npz import read_max_patches
  src = tmp_path / "naflex.npz"
  save_npz(random_params(tiny_model(num_classes=3, classifier="map"), 16), src, max_patches=12)
  format_conversion.convert(str(src), str(tmp_path / "out.npz"), to="npz", image_size=32)
  assert read_max_patches(tmp_path / "out.npz") == 12
