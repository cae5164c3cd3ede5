"""Two-tower models against Hugging Face transformers on random weights: SiglipModel and
Siglip2Model (weights converted both ways by vit_jax.families.two_tower.hf_layout), and BertModel
for LiT's flaxformer-named BERT tower."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import traverse_util

from torch_libraries import (  # noqa: F401  # pylint: disable=unused-import
    declare_missing_torchvision_ops, fixture_torch)
from vit_jax.families.two_tower import hf_layout as two_tower_hf_layout
from vit_jax.families.two_tower import text_tower
from vit_jax.families.two_tower import model as two_tower

RTOL = 1e-5


@pytest.fixture(name="transformers")
def fixture_transformers(torch):
  declare_missing_torchvision_ops(torch)
  return pytest.importorskip("transformers")


def _relative(a, b):
  a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
  return np.abs(a - b).max() / np.abs(b).max()


def _randomize(torch, model):
  torch.manual_seed(0)
  with torch.no_grad():
    for p in model.parameters():
      p.normal_(0, 0.3)
  return model.eval()


def _hf_siglip(transformers, torch, kind):
  text = dict(vocab_size=50, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
              num_attention_heads=2, max_position_embeddings=8, projection_size=24)
  vision = dict(hidden_size=24, intermediate_size=40, num_hidden_layers=2,
                num_attention_heads=3, patch_size=8)
  if kind == "siglip":
    config = transformers.SiglipConfig(text_config=text, vision_config=dict(vision, image_size=32))
    model = transformers.SiglipModel(config)
  else:
    config = transformers.Siglip2Config(text_config=text,
                                        vision_config=dict(vision, num_patches=16))
    model = transformers.Siglip2Model(config)
  return _randomize(torch, model), dict(config.to_dict(), model_type=kind)


@pytest.mark.parametrize("kind", two_tower_hf_layout.KINDS)
def test_siglip_matches_transformers_both_ways(transformers, torch, kind):
  hf_model, config = _hf_siglip(transformers, torch, kind)
  state = {k: v.numpy() for k, v in hf_model.state_dict().items()}
  flat = two_tower_hf_layout.from_hf(state, config)
  back = two_tower_hf_layout.to_hf(flat, config)
  assert set(back) == set(state)
  for key, value in state.items():
    np.testing.assert_array_equal(back[key], value, err_msg=key)
  model = two_tower_hf_layout.model_from_config(config)
  rng = np.random.default_rng(0)
  images = rng.uniform(-1, 1, (3, 32, 32, 3)).astype(np.float32)
  tokens = rng.integers(0, 50, (4, 8)).astype(np.int32)
  zimg, ztxt, logits = jax.jit(model.apply)(
      {"params": traverse_util.unflatten_dict(flat, sep="/")}, images, tokens)
  inputs = dict(input_ids=torch.tensor(tokens, dtype=torch.long))
  if kind == "siglip":
    inputs["pixel_values"] = torch.tensor(images.transpose(0, 3, 1, 2))
  else:  # NaFlex input: patches flattened (row, column, channel), the native 4x4 grid
    patches = images.reshape(3, 4, 8, 4, 8, 3).transpose(0, 1, 3, 2, 4, 5).reshape(3, 16, -1)
    inputs.update(pixel_values=torch.tensor(patches),
                  pixel_attention_mask=torch.ones(3, 16, dtype=torch.long),
                  spatial_shapes=torch.tensor([[4, 4]] * 3))
  with torch.no_grad():
    out = hf_model(**inputs)
  assert _relative(zimg, out.image_embeds.numpy()) <= RTOL
  assert _relative(ztxt, out.text_embeds.numpy()) <= RTOL
  assert _relative(logits, out.logits_per_image.numpy()) <= RTOL
  # The reading: a sigmoid per pair, as SigLIP's loss trains it.
  np.testing.assert_allclose(two_tower.scores(logits, "siglip"),
                             torch.sigmoid(out.logits_per_image).numpy(), rtol=1e-5, atol=1e-7)


def _bert_to_hf(flat, depth):
  """Our flaxformer-named BERT -> HF BertModel's state dict."""
  b = "BertEncoder_0/"
  state = {"embeddings.word_embeddings.weight": flat[b + "embedder/embedders_token_ids/embedding"],
           "embeddings.position_embeddings.weight":
               flat[b + "embedder/embedders_position_ids/embedding"],
           "embeddings.token_type_embeddings.weight":
               flat[b + "embedder/embedders_segment_ids/embedding"],
           "embeddings.LayerNorm.weight": flat[b + "layer_norm/scale"],
           "embeddings.LayerNorm.bias": flat[b + "layer_norm/bias"]}
  for i in range(depth):
    ours = f"{b}encoder_block/layer_sequence/layers_{i}/"
    hf = f"encoder.layer.{i}."
    pairs = {"attention_block/attention_layer/query": "attention.self.query",
             "attention_block/attention_layer/key": "attention.self.key",
             "attention_block/attention_layer/value": "attention.self.value",
             "attention_block/dense_layer": "attention.output.dense",
             "mlp_block/mlp/dense_layer": "intermediate.dense",
             "mlp_block/dense_layer": "output.dense"}
    for o, h in pairs.items():
      state[f"{hf}{h}.weight"] = flat[f"{ours}{o}/kernel"].T
      state[f"{hf}{h}.bias"] = flat[f"{ours}{o}/bias"]
    for o, h in (("attention_block", "attention.output"), ("mlp_block", "output")):
      state[f"{hf}{h}.LayerNorm.weight"] = flat[f"{ours}{o}/layer_norm/scale"]
      state[f"{hf}{h}.LayerNorm.bias"] = flat[f"{ours}{o}/layer_norm/bias"]
  return state


def test_lit_bert_matches_transformers_bert(transformers, torch):
  tower = text_tower.BertTextEncoder(None, width=16, depth=2, mlp_dim=32, num_heads=2,
                                     vocab_size=40, max_length=20)
  tokens = np.array([[2, 7, 9, 11, 0, 0], [2, 5, 6, 7, 8, 3]], np.int32)  # padded with 0
  params = jax.jit(tower.init)(jax.random.PRNGKey(1), jnp.asarray(tokens))["params"]
  rng = np.random.default_rng(2)
  params = jax.tree.map(lambda a: np.asarray(a) + np.float32(0.2) * rng.standard_normal(
      a.shape, np.float32), params)  # non-trivial LayerNorms and biases
  flat = traverse_util.flatten_dict(params, sep="/")
  config = transformers.BertConfig(vocab_size=40, hidden_size=16, num_hidden_layers=2,
                                   num_attention_heads=2, intermediate_size=32,
                                   max_position_embeddings=20, layer_norm_eps=1e-12,
                                   hidden_act="gelu_pytorch_tanh")  # flax's nn.gelu
  bert = transformers.BertModel(config, add_pooling_layer=False).eval()
  missing = bert.load_state_dict({k: torch.tensor(np.asarray(v, np.float32))
                                  for k, v in _bert_to_hf(flat, 2).items()}, strict=False)
  assert not missing.unexpected_keys and not [
      k for k in missing.missing_keys if "position_ids" not in k]
  with torch.no_grad():
    hidden = bert(input_ids=torch.tensor(tokens, dtype=torch.long),
                  attention_mask=torch.tensor(tokens != 0, dtype=torch.long)).last_hidden_state
  ours = jax.jit(tower.apply)({"params": params}, jnp.asarray(tokens))
  assert _relative(ours, hidden[:, 0].numpy()) <= RTOL  # pooled on [CLS]


def test_configs_vit_jax_cannot_compute_are_refused_in_one_line():
  text = dict(vocab_size=50, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
              num_attention_heads=2, max_position_embeddings=8)
  vision = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                num_attention_heads=2, image_size=32, patch_size=8)
  config = dict(model_type="siglip", text_config=text, vision_config=vision)
  assert isinstance(two_tower_hf_layout.model_from_config(config), two_tower.TwoTower)
  for bad, match in ((dict(config, model_type="clip"), "model_type 'clip'"),
                     (dict(config, vision_config=dict(vision, hidden_act="gelu")), "tanh GELU"),
                     (dict(config, text_config=dict(text, layer_norm_eps=1e-5)), "eps 1e-6"),
                     (dict(config, vision_config=dict(vision, vision_use_head=False)),
                      "attention-pooling head")):
    with pytest.raises(ValueError, match=match) as e:
      two_tower_hf_layout.model_from_config(bad)
    assert "\n" not in str(e.value)
