"""big_vision's ViT variants (MAP head, sincos2d, no class token, scan-stacked blocks) load,
run as big_vision's model code computes them, fine-tune and save.

The files are written the way big_vision's vit.py names its parameters (Linen numbering
inside blocks, `pos_embedding` at the top level and added before the class token,
`MAPHead_0`, `Transformer/encoderblock` stacked by depth with scan=True), and the truth
is a float64 numpy transcription of that model code, independent of ours.
"""

import logging

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from flax import traverse_util

from conftest import TINY, random_params, tiny_model
from vit_jax import CheckpointError, create_model, load_npz, save_npz

LINEN = {"MultiHeadDotProductAttention_1": "MultiHeadDotProductAttention_0",
         "LayerNorm_2": "LayerNorm_1", "MlpBlock_3": "MlpBlock_0"}
IMAGE = 16


# ---- big_vision's model code, transcribed to float64 numpy ----

def layer_norm(x, p):
  mean = x.mean(-1, keepdims=True)
  return (x - mean) / np.sqrt(x.var(-1, keepdims=True) + 1e-6) * p["scale"] + p["bias"]


def gelu(x):  # flax.linen.gelu: approximate=True
  return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))


def attention(inputs_q, inputs_kv, p):
  project = lambda x, n: np.einsum("bld,dhk->blhk", x, p[n]["kernel"]) + p[n]["bias"]
  q, k, v = project(inputs_q, "query"), project(inputs_kv, "key"), project(inputs_kv, "value")
  logits = np.einsum("bqhk,bthk->bhqt", q / np.sqrt(q.shape[-1]), k)
  weights = np.exp(logits - logits.max(-1, keepdims=True))
  weights /= weights.sum(-1, keepdims=True)
  mixed = np.einsum("bhqt,bthk->bqhk", weights, v)
  return np.einsum("bqhk,hkd->bqd", mixed, p["out"]["kernel"]) + p["out"]["bias"]


def mlp(x, p):
  hidden = gelu(x @ p["Dense_0"]["kernel"] + p["Dense_0"]["bias"])
  return hidden @ p["Dense_1"]["kernel"] + p["Dense_1"]["bias"]


def posemb_sincos_2d(h, w, width, temperature=10_000.):
  y, x = np.mgrid[:h, :w]
  omega = np.arange(width // 4) / (width // 4 - 1)
  omega = 1. / (temperature**omega)
  y = np.einsum("m,d->md", y.flatten(), omega)
  x = np.einsum("m,d->md", x.flatten(), omega)
  return np.concatenate([np.sin(x), np.cos(x), np.sin(y), np.cos(y)], axis=1)[None]


def big_vision_logits(params, images, pool_type):
  """big_vision.models.vit._Model.__call__ (scan=False) in numpy."""
  p = jax.tree.map(lambda a: np.asarray(a, np.float64), params)
  kernel = p["embedding"]["kernel"]
  patch = kernel.shape[0]
  b, height, width, c = images.shape
  h, w = height // patch, width // patch
  patches = images.astype(np.float64).reshape(b, h, patch, w, patch, c)
  x = np.einsum("bhpwqc,pqcd->bhwd", patches, kernel) + p["embedding"]["bias"]
  x = x.reshape(b, h * w, -1)
  x = x + (p["pos_embedding"] if "pos_embedding" in p else posemb_sincos_2d(h, w, x.shape[-1]))
  if pool_type == "tok":
    x = np.concatenate([np.tile(p["cls"], (b, 1, 1)), x], axis=1)
  blocks = p["Transformer"]
  for layer in range(len([k for k in blocks if k.startswith("encoderblock_")])):
    block = blocks[f"encoderblock_{layer}"]
    y = layer_norm(x, block["LayerNorm_0"])
    x = x + attention(y, y, block["MultiHeadDotProductAttention_0"])
    x = x + mlp(layer_norm(x, block["LayerNorm_1"]), block["MlpBlock_0"])
  x = layer_norm(x, blocks["encoder_norm"])
  if pool_type == "map":
    head = p["MAPHead_0"]
    x = attention(np.tile(head["probe"], (b, 1, 1)), x, head["MultiHeadDotProductAttention_0"])
    x = (x + mlp(layer_norm(x, head["LayerNorm_0"]), head["MlpBlock_0"]))[:, 0]
  elif pool_type == "gap":
    x = x.mean(axis=1)
  else:
    x = x[:, 0]
  if "pre_logits" in p:
    x = np.tanh(x @ p["pre_logits"]["kernel"] + p["pre_logits"]["bias"])
  return x @ p["head"]["kernel"] + p["head"]["bias"]


# ---- files in big_vision's layout ----

def big_vision_params(pool_type="map", posemb="learn", rep_size=None, seed=0, **sizes):
  """Random non-trivial params named as big_vision's vit.py names them (scan=False)."""
  classifier = {"tok": "token", "gap": "gap", "map": "map"}[pool_type]
  module = tiny_model(classifier=classifier, posemb=posemb, representation_size=rep_size,
                      **sizes)
  flat = traverse_util.flatten_dict(random_params(module, IMAGE, seed), sep="/")
  out = {}
  for key, value in flat.items():
    parts = key.split("/")
    if len(parts) > 2 and parts[1].startswith("encoderblock_"):
      parts[2] = LINEN.get(parts[2], parts[2])
    out["/".join(parts)] = np.asarray(value, np.float32)
  if posemb == "learn":  # big_vision adds it to the patches only, before the class token
    table = out.pop("Transformer/posembed_input/pos_embedding")
    out["pos_embedding"] = table[:, 1:] if pool_type == "tok" else table
  return traverse_util.unflatten_dict(out, sep="/")


def scan_stacked(params):
  """big_vision's scan=True layout: the blocks stacked under Transformer/encoderblock."""
  encoder = dict(params["Transformer"])
  names = sorted((k for k in encoder if k.startswith("encoderblock_")),
                 key=lambda k: int(k.split("_")[1]))
  encoder["encoderblock"] = jax.tree.map(lambda *a: np.stack(a),
                                         *[encoder.pop(n) for n in names])
  return {**params, "Transformer": encoder}


def write(params, path, prefix="", dtype=np.float32):
  flat = traverse_util.flatten_dict(params, sep="/")
  np.savez(path, **{prefix + k: np.asarray(v, np.float32).astype(dtype) for k, v in flat.items()})
  return path


def images(seed=0, side=IMAGE):
  return np.random.default_rng(seed).uniform(-1, 1, (2, side, side, 3)).astype(np.float32)


def relative_error(ours, truth):
  return float(np.max(np.abs(ours - truth)) / np.max(np.abs(truth)))


VARIANTS = {  # id: (pool_type, posemb, rep_size, stacked, prefix, dtype)
    "map-learn-scan-params": ("map", "learn", None, True, "params/", np.float32),
    "map-sincos2d-prelogits-bf16": ("map", "sincos2d", 16, False, "", ml_dtypes.bfloat16),
    "gap-sincos2d": ("gap", "sincos2d", None, False, "", np.float32),
    "gap-learn-scan": ("gap", "learn", None, True, "", np.float32),
    "tok-sincos2d-scan": ("tok", "sincos2d", None, True, "", np.float32),
    "tok-learn": ("tok", "learn", None, False, "", np.float32),
}


@pytest.mark.parametrize("variant", VARIANTS)
def test_big_vision_files_compute_what_big_vision_computes(tmp_path, variant):
  pool_type, posemb, rep_size, stacked, prefix, dtype = VARIANTS[variant]
  params = big_vision_params(pool_type, posemb, rep_size)
  stored = jax.tree.map(lambda a: np.asarray(a, np.float32).astype(dtype).astype(np.float32),
                        params)
  written = write(scan_stacked(params) if stacked else params, tmp_path / "bv.npz", prefix, dtype)
  module, ours = load_npz(written)
  assert module.classifier == {"tok": "token"}.get(pool_type, pool_type)
  assert module.posemb == posemb and module.representation_size == rep_size
  x = images()
  truth = big_vision_logits(stored, x, pool_type)
  assert relative_error(np.asarray(module.apply({"params": ours}, x)), truth) < 1e-5


@pytest.mark.parametrize("variant", ["map-learn-scan-params", "tok-sincos2d-scan"])
def test_round_trip_fine_tune_and_other_sizes(tmp_path, variant):
  pool_type, posemb, rep_size, stacked, prefix, dtype = VARIANTS[variant]
  params = big_vision_params(pool_type, posemb, rep_size)
  path = write(scan_stacked(params) if stacked else params, tmp_path / "bv.npz", prefix, dtype)
  module, ours = load_npz(path)
  save_npz(ours, tmp_path / "ours.npz")
  saved = dict(np.load(tmp_path / "ours.npz"))
  assert ("Transformer/posembed_input/pos_embedding" in saved) == (posemb == "learn")
  assert any(k.startswith("MAPHead_0/") for k in saved) == (pool_type == "map")
  again_module, again = load_npz(tmp_path / "ours.npz")
  assert again_module == module
  jax.tree.map(np.testing.assert_array_equal, again, ours)

  # Fine-tuning setup: a new zero head, another resolution, scan_layers; once the head
  # has moved off zero, gradients reach the pooling parameters.
  tuned, tuned_params = load_npz(path, num_classes=3, image_size=24, scan_layers=True)
  assert tuned.classifier == module.classifier and tuned.posemb == posemb
  assert not np.any(tuned_params["head"]["kernel"])
  tuned_params["head"]["kernel"] = np.random.default_rng(0).normal(
      size=tuned_params["head"]["kernel"].shape).astype(np.float32)
  x, labels = images(1, 24), jax.nn.one_hot(np.array([0, 2]), 3)

  def loss(p):
    return -jnp.mean(jnp.sum(jax.nn.log_softmax(tuned.apply({"params": p}, x)) * labels, -1))
  grads = jax.jit(jax.grad(loss))(tuned_params)  # eagerly, each op of the VJP compiles
  pooled_by = "MAPHead_0" if pool_type == "map" else "cls"
  assert float(jnp.abs(jax.tree.leaves(grads[pooled_by])[0]).sum()) > 0


def test_old_big_vision_layouts(tmp_path):
  """Posemb in Transformer/ (before 2022), a table with the class-token row (older), a
  MAP head inlined at the top level (ViT-G development): same function."""
  tok = big_vision_params("tok", "learn", seed=1)
  truth = big_vision_logits(tok, images(), "tok")
  old = {k: v for k, v in tok.items() if k != "pos_embedding"}
  old["Transformer"] = {**tok["Transformer"], "pos_embedding": tok["pos_embedding"]}
  combined = dict(tok)
  combined["pos_embedding"] = np.concatenate([0.1 * np.ones_like(tok["cls"]),
                                              tok["pos_embedding"]], axis=1)
  combined["cls"] = tok["cls"] - 0.1
  for params in (old, combined):
    module, ours = load_npz(write(params, tmp_path / "old.npz"))
    assert relative_error(np.asarray(module.apply({"params": ours}, images())), truth) < 1e-5
  mapped = big_vision_params("map", "learn", seed=2)
  inlined = {k: v for k, v in mapped.items() if k != "MAPHead_0"}
  inlined.update(mapped["MAPHead_0"])
  module, ours = load_npz(write(inlined, tmp_path / "inlined.npz"))
  assert module.classifier == "map"
  assert relative_error(np.asarray(module.apply({"params": ours}, images())),
                        big_vision_logits(mapped, images(), "map")) < 1e-5


def test_model_name_keeps_the_files_pooling_and_posemb(tmp_path):
  """A big_vision MAP / sincos2d Ti/16 is a ViT-Ti_16 (it used to fail as 'is it a
  ViT-Ti_16? pass the right model_name')."""
  sizes = dict(patch_size=16, hidden_size=192, mlp_dim=768, num_heads=3, num_layers=12)
  module = create_model("ViT-Ti_16", num_classes=4, classifier="map", posemb="sincos2d")
  shapes = jax.eval_shape(module.init, jax.random.PRNGKey(0), jnp.zeros((1, 224, 224, 3)))
  params = jax.tree.map(lambda s: np.full(s.shape, 0.01, np.float32), shapes["params"])
  path = write(params, tmp_path / "ti.npz")
  loaded, _ = load_npz(path, model_name="ViT-Ti_16")
  assert (loaded.classifier, loaded.posemb) == ("map", "sincos2d")
  assert {k: getattr(loaded, k) for k in sizes} == sizes


def test_sincos2d_file_says_what_it_is_and_builds_for_224(tmp_path, caplog):
  path = write(big_vision_params("gap", "sincos2d"), tmp_path / "sincos.npz")
  with caplog.at_level(logging.INFO, logger="vit_jax"):
    module, params = load_npz(path)
  assert "no position-embedding table: a big_vision posemb='sincos2d' model" in caplog.text
  assert "Transformer" in params and "posembed_input" not in params["Transformer"]
  assert module.apply({"params": params}, images(0, 224)).shape == (2, 5)


@pytest.mark.parametrize("edit,message", [
    (lambda p: {k: v for k, v in p.items() if k != "embedding"},
     r"not a ViT checkpoint: key embedding/kernel is missing \(the file holds MAPHead_0/ "
     r"\(\d+ arrays\), Transformer/ \(\d+ arrays\), head/ \(2 arrays\), pos_embedding\)"),
    (lambda p: {**p, "cls": np.zeros((1, 1, TINY["hidden_size"]), np.float32)},
     "has both a class token \\(cls\\) and a MAP head \\(MAPHead_0\\)"),
])
def test_files_that_are_no_supported_vit_say_what_they_hold(tmp_path, edit, message):
  path = write(edit(big_vision_params("map", "learn")), tmp_path / "odd.npz")
  with pytest.raises(CheckpointError, match=message):
    load_npz(path)


def test_sincos2d_needs_a_width_divisible_by_four(tmp_path):
  params = big_vision_params("gap", "learn", hidden_size=30, num_heads=2)
  del params["pos_embedding"]
  with pytest.raises(CheckpointError, match="no Transformer/posembed_input/pos_embedding .* "
                     "multiple of 4 and at least 8, not 30"):
    load_npz(write(params, tmp_path / "odd.npz"))
