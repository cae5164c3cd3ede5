"""MLP-Mixer (vit_jax.families.mixer.model): the released names and shapes, the original code's
function (a float64 numpy transcription of the Mixer paper's equations and of the original
models_mixer.py's layer order, written independently of ours), timm's MlpMixer on the same
weights, and the training options (scan, remat, stochastic depth, dropout, bf16)."""

import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import traverse_util

from conftest import random_params
from torch_libraries import (  # noqa: F401  # pylint: disable=unused-import
    fixture_timm, fixture_torch)
from vit_jax import create_model
from vit_jax.base import errors
from vit_jax.families.mixer import model as mixer
from vit_jax.models import model_config
from vit_jax.models import family_registry
from vit_jax.training import sharding
from helpers import load_module

TINY_MIXER = dict(patch_size=4, hidden_dim=32, num_blocks=2, tokens_mlp_dim=8,
                  channels_mlp_dim=64)
IMAGE = 16  # 4x4 = 16 patches


def tiny_mixer(num_classes=5, **overrides):
  return create_model("Mixer-B_16", num_classes=num_classes, **{**TINY_MIXER, **overrides})


@pytest.fixture(name="tiny", scope="module")
def fixture_tiny():
  module = tiny_mixer()
  params = random_params(module, IMAGE)
  images = np.random.default_rng(1).uniform(-1, 1, (3, IMAGE, IMAGE, 3)).astype(np.float32)
  return module, params, images, np.asarray(jax.jit(module.apply)({"params": params}, images))


# ---- the original Mixer, transcribed to float64 numpy ----

def layer_norm(x, p):
  mean = x.mean(-1, keepdims=True)
  return (x - mean) / np.sqrt(x.var(-1, keepdims=True) + 1e-6) * p["scale"] + p["bias"]


def mlp(x, p):  # Dense -> flax.linen.gelu (tanh approximation) -> Dense
  h = x @ p["Dense_0"]["kernel"] + p["Dense_0"]["bias"]
  h = 0.5 * h * (1 + np.tanh(np.sqrt(2 / np.pi) * (h + 0.044715 * h**3)))
  return h @ p["Dense_1"]["kernel"] + p["Dense_1"]["bias"]


def reference_logits(params, images):
  """Per-patch linear stem, then per block U = X + W2 g(W1 LN(X)^T) (tokens) and
  Y = U + W4 g(W3 LN(U)) (channels); LN, mean over patches, linear head."""
  p = jax.tree.map(lambda a: np.asarray(a, np.float64), params)
  kernel = p["stem"]["kernel"]
  patch, batch, side = kernel.shape[0], images.shape[0], images.shape[1]
  grid = side // patch
  patches = images.astype(np.float64).reshape(batch, grid, patch, grid, patch, 3)
  x = np.einsum("bhpwqc,pqcd->bhwd", patches, kernel).reshape(batch, grid * grid, -1)
  x = x + p["stem"]["bias"]
  for i in range(len([k for k in p if k.startswith("MixerBlock_")])):
    block = p[f"MixerBlock_{i}"]
    tokens = layer_norm(x, block["LayerNorm_0"]).transpose(0, 2, 1)
    x = x + mlp(tokens, block["token_mixing"]).transpose(0, 2, 1)
    x = x + mlp(layer_norm(x, block["LayerNorm_1"]), block["channel_mixing"])
  x = layer_norm(x, p["pre_head_layer_norm"]).mean(1)
  return x @ p["head"]["kernel"] + p["head"]["bias"]


def relative_error(a, b):
  return float(np.max(np.abs(a - b)) / np.max(np.abs(b)))


def test_logits_equal_the_original_function(tiny):
  module, params, images, logits = tiny
  assert relative_error(logits, reference_logits(params, images)) <= 1e-5


def flat_shapes(name, side=224, **overrides):
  module = create_model(name, num_classes=1000, scan_layers=True, **overrides)
  shapes = jax.eval_shape(module.init, jax.random.PRNGKey(0), jnp.zeros((1, side, side, 3)))
  flat = {}
  for key, value in traverse_util.flatten_dict(shapes["params"], sep="/").items():
    if key.startswith("MixerBlock/"):  # stacked by depth: one entry per block
      for i in range(value.shape[0]):
        flat[key.replace("MixerBlock/", f"MixerBlock_{i}/")] = value.shape[1:]
    else:
      flat[key] = value.shape
  return flat


def test_released_names_and_shapes():
  """The released Mixer-B/16 file's keys (the original's module names) and shapes."""
  shapes = flat_shapes("Mixer-B_16")
  assert {k: v for k, v in shapes.items() if not k.startswith("MixerBlock_")} == {
      "stem/kernel": (16, 16, 3, 768), "stem/bias": (768,),
      "pre_head_layer_norm/scale": (768,), "pre_head_layer_norm/bias": (768,),
      "head/kernel": (768, 1000), "head/bias": (1000,)}
  assert {k[len("MixerBlock_11/"):]: v for k, v in shapes.items()
          if k.startswith("MixerBlock_11/")} == {
      "LayerNorm_0/scale": (768,), "LayerNorm_0/bias": (768,),
      "token_mixing/Dense_0/kernel": (196, 384), "token_mixing/Dense_0/bias": (384,),
      "token_mixing/Dense_1/kernel": (384, 196), "token_mixing/Dense_1/bias": (196,),
      "LayerNorm_1/scale": (768,), "LayerNorm_1/bias": (768,),
      "channel_mixing/Dense_0/kernel": (768, 3072), "channel_mixing/Dense_0/bias": (3072,),
      "channel_mixing/Dense_1/kernel": (3072, 768), "channel_mixing/Dense_1/bias": (768,)}
  assert len(shapes) == 6 + 12 * 12


# The Mixer paper's Table 1: parameters in millions at 224 px, rounded (which way, and with
# which head, it does not say: each is within 1 M of the backbone's count without a head).
TABLE_1 = {"Mixer-S_32": 19, "Mixer-S_16": 18, "Mixer-B_32": 60, "Mixer-B_16": 59,
           "Mixer-L_32": 206, "Mixer-L_16": 208, "Mixer-H_14": 431}


@pytest.mark.parametrize("name", TABLE_1)
def test_table_1_sizes(name):
  shapes = flat_shapes(name)
  millions = sum(np.prod(s) for k, s in shapes.items() if not k.startswith("head/")) / 1e6
  assert abs(millions - TABLE_1[name]) < 1


@pytest.mark.parametrize("spelling", ["Mixer-B_16", "Mixer-B/16", "mixer-b_16", "mixer_b16",
                                      "mixer_b16_224", "MIXER_B16"])
def test_short_names(spelling):
  assert family_registry.canonical_name(spelling) == "Mixer-B_16"
  assert family_registry.for_model_name(spelling).name == "mixer"


def test_vit_options_a_mixer_lacks_are_one_line():
  with pytest.raises(errors.InvalidInput, match="no pre_logits"):
    tiny_mixer(representation_size=32)
  with pytest.raises(TypeError, match="unknown Mixer option.*num_heads"):
    tiny_mixer(num_heads=2)
  with pytest.raises(errors.InvalidInput, match="dropout_rate"):
    tiny_mixer(dropout_rate=1.5)
  # The attention-kernel choices of a ViT config do nothing to a Mixer.
  assert tiny_mixer(attention_impl="xla", unpadded_inference=False) == tiny_mixer()


def test_scan_and_remat_are_the_same_function(tiny):
  module, params, images, logits = tiny
  scanned = module.clone(scan_layers=True, remat_policy="full")
  stacked = mixer.to_scan_layout(params)
  assert jax.tree.leaves(stacked["MixerBlock"])[0].shape[0] == 2
  np.testing.assert_allclose(scanned.apply({"params": stacked}, images), logits,
                             rtol=1e-5, atol=1e-6)
  assert jax.tree.all(jax.tree.map(np.array_equal, mixer.to_block_layout(stacked), params))


def test_representation_is_the_pooled_pre_head_features(tiny):
  module, params, images, logits = tiny
  features = jax.jit(module.apply, static_argnames="representation")(
      {"params": params}, images, representation=True)
  assert features.shape == (3, 32)
  np.testing.assert_allclose(features @ params["head"]["kernel"] + params["head"]["bias"],
                             logits, rtol=1e-5, atol=1e-5)


def test_stochastic_depth_drops_whole_branches(tiny):
  module, params, images, logits = tiny
  dropping = module.clone(stochastic_depth=0.5)
  assert np.array_equal(jax.jit(dropping.apply)({"params": params}, images), logits)  # eval
  train = jax.jit(lambda key: dropping.apply(
      {"params": params}, images, train=True, mutable=["intermediates"], rngs={"dropout": key}))
  dropped = 0
  for seed in range(4):
    out, state = train(jax.random.PRNGKey(seed))
    masks = {(block, branch): np.asarray(state["intermediates"][block][
        f"stochastic_depth_{branch}"][0]) for block in ("MixerBlock_0", "MixerBlock_1")
             for branch in ("token_mixing", "channel_mixing")}
    assert all(masks["MixerBlock_0", branch].all() for branch in ("token_mixing",
                                                                  "channel_mixing"))  # rate 0
    dropped += sum((~mask).sum() for mask in masks.values())
    if all(mask.all() for mask in masks.values()):  # nothing dropped: kept ones scaled by 1
      np.testing.assert_allclose(out, logits, rtol=1e-5, atol=1e-5)
  assert dropped > 0  # the last block's branches, at rate 0.5, over 4 x 3 examples


def test_dropout_and_bfloat16_run(tiny):
  module, params, images, logits = tiny
  noisy = jax.jit(lambda p: module.clone(dropout_rate=0.5).apply(
      {"params": p}, images, train=True, rngs={"dropout": jax.random.PRNGKey(0)}))(params)
  assert not np.allclose(noisy, logits)
  half = jax.jit(module.clone(dtype=jnp.bfloat16).apply)({"params": params}, images)
  assert half.dtype == jnp.float32
  assert relative_error(np.asarray(half), logits) < 0.05


def test_timm_mlp_mixer_computes_our_logits(tiny, timm, torch):
  """timm's MlpMixer (told the tanh GELU of the original) on our weights, mapped by hand
  from its documented state-dict names."""
  module, params, images, logits = tiny
  model = timm.models.mlp_mixer.MlpMixer(
      num_classes=5, img_size=IMAGE, patch_size=4, num_blocks=2, embed_dim=32,
      mlp_ratio=(8 / 32, 64 / 32), act_layer=lambda: torch.nn.GELU(approximate="tanh")).eval()
  t = lambda a: torch.from_numpy(np.ascontiguousarray(a))
  state = {"stem.proj.weight": t(params["stem"]["kernel"].transpose(3, 2, 0, 1)),
           "stem.proj.bias": t(params["stem"]["bias"]),
           "norm.weight": t(params["pre_head_layer_norm"]["scale"]),
           "norm.bias": t(params["pre_head_layer_norm"]["bias"]),
           "head.weight": t(params["head"]["kernel"].T), "head.bias": t(params["head"]["bias"])}
  for i in range(2):
    block = params[f"MixerBlock_{i}"]
    for ours, theirs in (("LayerNorm_0", "norm1"), ("LayerNorm_1", "norm2")):
      state[f"blocks.{i}.{theirs}.weight"] = t(block[ours]["scale"])
      state[f"blocks.{i}.{theirs}.bias"] = t(block[ours]["bias"])
    for ours, theirs in (("token_mixing", "mlp_tokens"), ("channel_mixing", "mlp_channels")):
      for dense, fc in (("Dense_0", "fc1"), ("Dense_1", "fc2")):
        state[f"blocks.{i}.{theirs}.{fc}.weight"] = t(block[ours][dense]["kernel"].T)
        state[f"blocks.{i}.{theirs}.{fc}.bias"] = t(block[ours][dense]["bias"])
  model.load_state_dict(state)
  with torch.no_grad():
    theirs = model(t(images.transpose(0, 3, 1, 2))).numpy()
  assert relative_error(theirs, logits) <= 1e-5



def test_sharding_rules_split_both_mlps():
  """Tensor parallelism splits the hidden units of both MLPs (Megatron-style, as the ViT's
  MLP), per block or stacked by scan; fsdp shards what is left."""
  spec = lambda name, shape, **axes: tuple(sharding.partition_spec(name, shape, axes))
  for mlp in ("token_mixing", "channel_mixing"):
    assert spec(f"params/MixerBlock_3/{mlp}/Dense_0/kernel", (196, 384), tensor=4) == (
        None, "tensor")
    assert spec(f"params/MixerBlock_3/{mlp}/Dense_0/bias", (384,), tensor=4) == ("tensor",)
    assert spec(f"params/MixerBlock_3/{mlp}/Dense_1/kernel", (384, 196), tensor=4) == (
        "tensor", None)
    assert spec(f"params/MixerBlock/{mlp}/Dense_1/kernel", (12, 384, 196), tensor=4) == (
        None, "tensor", None)
  assert spec("params/MixerBlock/channel_mixing/Dense_0/kernel", (12, 768, 3072),
              fsdp=8) == (None, None, "fsdp")
  assert spec("params/stem/kernel", (16, 16, 3, 768), tensor=4) == (None,) * 4


def test_tensor_parallel_must_split_both_widths():
  mesh = types.SimpleNamespace(shape={"tensor": 3})
  with pytest.raises(sharding.ShardingError,
                     match=r"8 and 64: use config.mesh.tensor in \[1, 2, 4, 8\]"):
    sharding.check_model_tensor_parallel(tiny_mixer(), mesh)
  sharding.check_model_tensor_parallel(tiny_mixer(), types.SimpleNamespace(shape={"tensor": 4}))


def test_a_config_from_a_released_file_builds_the_width_loading_gives():
  """What plan and benchmark build for a fine-tune from a released (224 px) Mixer file at
  448 px: the token-mixing MLPs load_npz's resize gives, 4 copies wide."""
  config = load_module("mixer_b16.py").get_config()
  assert model_config.model_from_config(config, 10).tokens_mlp_dim == 384
  config.pp.crop = 448
  assert model_config.model_from_config(config, 10).tokens_mlp_dim == 4 * 384
  config.pretrained = "sam/Mixer-B_16"
  assert model_config.model_from_config(config, 10).tokens_mlp_dim == 4 * 384
  config.pretrained = None  # from scratch: the name's width at any size
  assert model_config.model_from_config(config, 10).tokens_mlp_dim == 384
