"""timm and Hugging Face transformers themselves (the `interop` extra: torch, timm,
transformers) against our conversions (vit_jax.checkpoints.format_conversion): their models compute
our logits (1e-5 relative for plain ViTs, 2e-4 for hybrids, whose stem timm standardises
with another epsilon), their checkpoints come back bit-identical through ours, and a
PyTorch file with pickled objects is refused. Skipped where the libraries do not import;
test_interop.py checks names, shapes and configs without them."""

import json

import jax
import numpy as np
import pytest
from safetensors.numpy import load_file

from conftest import TINY, random_params
from interop_files import IMAGE, images, logits, relative_error, saved, tiny_file
from torch_libraries import (  # noqa: F401  # pylint: disable=unused-import
    fixture_timm, fixture_torch, fixture_transformers)
from vit_jax import CheckpointError, create_model, load_npz
from vit_jax.checkpoints import format_conversion
from vit_jax.training.objectives import flexi


def run_torch(torch, model, x):
  with torch.no_grad():
    out = model(torch.from_numpy(np.ascontiguousarray(x.transpose(0, 3, 1, 2))))
  return getattr(out, "logits", out).numpy()


def timm_model(timm, folder):
  return timm.create_model(f"local-dir:{folder}", pretrained=True).eval()


CASES = {  # id: (released name, overrides, image size, tolerance)
    "Ti16-depth2": ("ViT-Ti_16", dict(num_layers=2), 224, 1e-5),
    # B16-384's widths, heads and 577 tokens; blocks are all alike, and "depth12" has 12
    # (block numbers past 9, error through 25 LayerNorms). Each catches a LayerNorm eps of
    # 1e-5 or an erf GELU on the other side (3.5e-5 and 8e-5 relative, measured), which the
    # full 12-block B16-384 (24 s here) caught by less (1.9e-5).
    "B16-384-depth2": ("ViT-B_16", dict(num_layers=2), 384, 1e-5),
    "depth12": ("ViT-Ti_16", dict(TINY, num_layers=12), IMAGE, 1e-5),
    "gap": ("ViT-Ti_16", dict(TINY, classifier="gap"), IMAGE, 1e-5),
    "map-sincos2d": ("ViT-Ti_16", dict(TINY, classifier="map", posemb="sincos2d"), IMAGE, 1e-5),
    # timm's stem standardises kernels with another epsilon (see timm_layout): 5e-5 to
    # 1.1e-4 measured over random weights and inputs; 2e-4 keeps clear of that spread.
    # The ResNet-50 stem at 384 px is what this case adds to B16-384-depth2.
    "R50+B16-384-depth2": ("R50+ViT-B_16", dict(num_layers=2), 384, 2e-4),
}


@pytest.mark.parametrize("case", CASES)
def test_timm_and_hf_compute_our_logits(tmp_path, timm, transformers, torch, case):
  name, overrides, side, tolerance = CASES[case]
  module = create_model(name, num_classes=10, **overrides)
  params = random_params(module, side)
  src = saved(module, params, tmp_path / "ours.npz")
  x = images(side, batch=1 if side > 224 else 2)
  ours = np.asarray(jax.jit(module.apply)({"params": params}, x))
  format_conversion.convert(src, tmp_path / "timm", to="timm", image_size=side)
  assert relative_error(run_torch(torch, timm_model(timm, tmp_path / "timm"), x), ours) <= tolerance
  if module.classifier == "token" and module.resnet_stages is None:
    format_conversion.convert(src, tmp_path / "hf", to="hf")
    hf = transformers.ViTForImageClassification.from_pretrained(tmp_path / "hf").eval()
    assert relative_error(run_torch(torch, hf, x), ours) <= tolerance


def test_pre_logits_model(tmp_path, timm, transformers, torch):
  """--pre_logits=pooler: ViTModel's pooler_output is our representation; =drop: timm's
  features are our pooled token (the representation of the model without pre_logits)."""
  src = tiny_file(tmp_path, representation_size=24)
  x = images()
  module, params = load_npz(src)
  representation = np.asarray(module.apply({"params": params}, x, representation=True))
  format_conversion.convert(src, tmp_path / "hf", to="hf", pre_logits="pooler")
  hf = transformers.ViTModel.from_pretrained(tmp_path / "hf").eval()
  with torch.no_grad():
    pooled = hf(pixel_values=torch.from_numpy(x.transpose(0, 3, 1, 2))).pooler_output.numpy()
  assert relative_error(pooled, representation) <= 1e-5
  format_conversion.convert(src, tmp_path / "timm", to="timm", pre_logits="drop")
  module, params = load_npz(src, num_classes=1, pre_logits=False)
  features = np.asarray(module.apply({"params": params}, x, representation=True))
  assert relative_error(run_torch(torch, timm_model(timm, tmp_path / "timm"), x),
                        features) <= 1e-5


def test_their_checkpoints_round_trip_bit_identical_and_compute_their_logits(
    tmp_path, timm, transformers, torch):
  """timm and HF models (their own random init, tanh GELU, LayerNorm eps 1e-6) -> ours
  -> theirs: the same tensors; our logits match theirs."""
  from safetensors.torch import save_file as save_torch  # pylint: disable=import-outside-toplevel
  torch.manual_seed(0)
  x = images(32)
  theirs = {}
  timm_vit = timm.create_model("vit_tiny_patch16_224", img_size=32, patch_size=8, depth=2,
                               num_classes=7, act_layer="gelu_tanh").eval()
  theirs["timm"] = timm_vit.state_dict()
  save_torch(theirs["timm"], str(tmp_path / "timm.safetensors"))
  torch.save(theirs["timm"], tmp_path / "timm.pth")
  config = transformers.ViTConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                  intermediate_size=128, image_size=32, patch_size=8,
                                  num_labels=7, hidden_act="gelu_pytorch_tanh",
                                  layer_norm_eps=1e-6)
  hf_vit = transformers.ViTForImageClassification(config).eval()
  hf_vit.save_pretrained(tmp_path / "hf")
  for name, model, src in (("timm", timm_vit, tmp_path / "timm.safetensors"),
                           ("timm", timm_vit, tmp_path / "timm.pth"),
                           ("hf", hf_vit, tmp_path / "hf")):
    truth = run_torch(torch, model, x)
    assert relative_error(logits(src, x), truth) <= 1e-5, src
    format_conversion.convert(src, tmp_path / "ours.npz", overwrite=True)  # one file per source
    format_conversion.convert(tmp_path / "ours.npz", tmp_path / f"back-{name}", to=name)
    back = load_file(str(tmp_path / f"back-{name}/model.safetensors"))
    original = {k: v.numpy() for k, v in (theirs["timm"] if name == "timm" else
                                          load_file_torch(tmp_path / "hf")).items()}
    assert set(back) == set(original)
    jax.tree.map(np.testing.assert_array_equal, back, original)
  # no_embed_class (no position embedding for the class token) comes back as such.
  no_row = timm.create_model("vit_tiny_patch16_224", img_size=32, patch_size=8, depth=2,
                             num_classes=7, act_layer="gelu_tanh", no_embed_class=True).eval()
  save_torch(no_row.state_dict(), str(tmp_path / "no_row.safetensors"))
  assert relative_error(logits(tmp_path / "no_row.safetensors", x),
                        run_torch(torch, no_row, x)) <= 1e-5
  format_conversion.convert(tmp_path / "no_row.safetensors", tmp_path / "no_row.npz")
  format_conversion.convert(tmp_path / "no_row.npz", tmp_path / "back-no_row", to="timm")
  assert json.loads((tmp_path / "back-no_row/config.json").read_text())[
      "model_args"]["no_embed_class"] is True
  back = load_file(str(tmp_path / "back-no_row/model.safetensors"))
  original = {k: v.numpy() for k, v in no_row.state_dict().items()}
  assert set(back) == set(original)
  jax.tree.map(np.testing.assert_array_equal, back, original)
  # A ViTModel without pooler: no head, no pre_logits; it comes back as that ViTModel.
  backbone = transformers.ViTModel(config, add_pooling_layer=False).eval()
  backbone.save_pretrained(tmp_path / "backbone")
  format_conversion.convert(tmp_path / "backbone", tmp_path / "backbone.npz")
  lines = format_conversion.convert(tmp_path / "backbone.npz", tmp_path / "back-backbone", to="hf")
  assert lines[-1].endswith("ViTModel.from_pretrained("
                            f"{str(tmp_path / 'back-backbone')!r}, add_pooling_layer=False)")
  back = load_file(str(tmp_path / "back-backbone/model.safetensors"))
  original = {k: v.numpy() for k, v in load_file_torch(tmp_path / "backbone").items()}
  assert set(back) == set(original)
  jax.tree.map(np.testing.assert_array_equal, back, original)


def load_file_torch(folder):
  from safetensors.torch import load_file as load_torch  # pylint: disable=import-outside-toplevel
  return load_torch(str(folder / "model.safetensors"))


def test_a_pytorch_file_with_pickled_objects_is_refused_without_unsafe_advice(tmp_path, torch):
  import argparse  # pylint: disable=import-outside-toplevel
  torch.save({"weight": torch.zeros(2), "args": argparse.Namespace(lr=0.1)},
             tmp_path / "model.pth")  # a training script's habit: its arguments beside
  with pytest.raises(CheckpointError) as error:
    load_npz(tmp_path / "model.pth")
  message = str(error.value)
  assert message.startswith(f"{tmp_path / 'model.pth'} holds pickled Python objects besides "
                            "tensors, which vit_jax never unpickles")
  assert "safetensors.torch.save_file" in message and "\n" not in message
  assert "weights_only" not in message and "arbitrary code execution" not in message


def test_a_flexivit_export_runs_in_timm_at_its_patch_size(tmp_path, timm, torch):
  """A FlexiViT run's params.npz (objectives.flexi.export at patch 8) converted for timm
  computes the flexible model's logits at patch 8; convert --patch_size=4 of that file,
  what load_npz(patch_size=4) computes."""
  underlying = flexi.underlying(create_model("ViT-Ti_16", num_classes=10, **TINY), 8)
  params = random_params(underlying, IMAGE)
  src = saved(underlying, flexi.export(params, 8, IMAGE, has_cls=True), tmp_path / "p8.npz")
  x = images()
  ours = np.asarray(jax.jit(underlying.apply)({"params": params}, x))
  format_conversion.convert(src, tmp_path / "timm8", to="timm")
  assert relative_error(run_torch(torch, timm_model(timm, tmp_path / "timm8"), x), ours) <= 1e-5
  format_conversion.convert(src, tmp_path / "timm4", to="timm", patch_size=4)
  module, resized = load_npz(src, patch_size=4)
  ours = np.asarray(jax.jit(module.apply)({"params": resized}, x))
  assert relative_error(run_torch(torch, timm_model(timm, tmp_path / "timm4"), x), ours) <= 1e-5
