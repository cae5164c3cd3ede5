"""Variants of the released layout seen in the wild all load to the same function."""

import functools
import re

import jax
import numpy as np
import pytest

from vit_jax import CheckpointError, load_npz
from vit_jax.families.vit import npz_layout

LINEN_NAMES = {"MultiHeadDotProductAttention_1": "MultiHeadDotProductAttention_0",
               "LayerNorm_2": "LayerNorm_1", "MlpBlock_3": "MlpBlock_0"}


def with_prefix(arrays):
  out = {f"opt/target/{k}": v for k, v in arrays.items()}
  out["opt/state/step"] = np.array(3.0)  # optimizer state next to the weights is ignored
  return out


def linen_numbered(arrays):
  def rename(key):
    parts = key.split("/")
    if len(parts) > 2 and parts[1].startswith("encoderblock_"):
      parts[2] = LINEN_NAMES.get(parts[2], parts[2])
    return "/".join(parts)
  return {rename(k): v for k, v in arrays.items()}


def scan_stacked(arrays):
  """big_vision layout: blocks stacked on a depth axis, Linen numbering, top-level posemb
  added before the class token (so its class-token row must be zero to be equivalent)."""
  arrays = linen_numbered(arrays)
  blocks = {}
  out = {}
  for key, value in arrays.items():
    match = re.match(r"Transformer/encoderblock_(\d+)/(.*)", key)
    if match:
      blocks.setdefault(match.group(2), {})[int(match.group(1))] = value
    else:
      out[key] = value
  for rest, by_layer in blocks.items():
    out[f"Transformer/encoderblock/{rest}"] = np.stack([by_layer[i] for i in sorted(by_layer)])
  posemb = out.pop(npz_layout.POSEMB)
  out["pos_embedding"] = posemb[:, 1:]
  out["cls"] = out["cls"] + posemb[:, :1]
  return out


def flat_group_norm(arrays):
  return {k: v.reshape(-1) if v.ndim == 4 and v.shape[:3] == (1, 1, 1) else v
          for k, v in arrays.items()}


@functools.lru_cache(maxsize=None)
def released(path):
  """(module, its apply jitted, the logits of the file at `path` on two fixture images):
  computed once for the four variants; eagerly, an apply at 224 px takes ~1 s."""
  module, params = load_npz(path)
  apply = jax.jit(module.apply)
  images = np.load(path.parent / "images-224.npy")[:2]
  return module, apply, images, np.asarray(apply({"params": params}, images))


@pytest.mark.parametrize("checkpoint", ["vit-ti16.npz", "r-vit-ti16.npz"])
@pytest.mark.parametrize("variant", [with_prefix, linen_numbered, scan_stacked, flat_group_norm])
def test_variant_gives_the_same_logits(released_fixtures, tmp_path, checkpoint, variant):
  original = dict(np.load(released_fixtures / checkpoint))
  np.savez(tmp_path / "variant.npz", **variant(original))
  module, apply, images, logits = released(released_fixtures / checkpoint)
  variant_module, variant_params = load_npz(tmp_path / "variant.npz")
  assert variant_module == module
  np.testing.assert_allclose(apply({"params": variant_params}, images), logits, rtol=1e-5,
                             atol=1e-5)


def test_group_norm_shapes_are_squeezed(released_fixtures):
  original = dict(np.load(released_fixtures / "r-vit-ti16.npz"))
  assert original["gn_root/scale"].shape == (1, 1, 1, 64)
  assert npz_layout.to_released_layout(original)["gn_root/scale"].shape == (64,)


def test_scan_stacked_blocks_are_split_in_order():
  stacked = {"Transformer/encoderblock/LayerNorm_0/scale": np.arange(6.0).reshape(3, 2)}
  flat = npz_layout.to_released_layout(stacked)
  for layer in range(3):
    np.testing.assert_array_equal(flat[f"Transformer/encoderblock_{layer}/LayerNorm_0/scale"],
                                  [2 * layer, 2 * layer + 1])


def test_infer_architecture_names_missing_key():
  with pytest.raises(KeyError, match="MlpBlock_3/Dense_0/kernel"):
    npz_layout.infer_architecture({
        "embedding/kernel": np.zeros((16, 16, 3, 8)),
        "Transformer/encoderblock_0/LayerNorm_0/scale": np.zeros(8),
        "Transformer/encoderblock_0/MultiHeadDotProductAttention_1/query/kernel":
            np.zeros((8, 2, 4))})


@pytest.mark.parametrize("arrays,message", [
    ({"Transformer/encoderblock/LayerNorm_0/scale": np.zeros((3, 2)),
      "Transformer/encoderblock/LayerNorm_0/bias": np.float32(0)},
     r"^Transformer/encoderblock/LayerNorm_0/bias has shape \(\), expected a leading depth axis "
     "of 3 like the other stacked blocks$"),
    ({"Transformer/encoderblock/LayerNorm_0/scale": np.zeros((3, 2)),
      "Transformer/encoderblock/LayerNorm_0/bias": np.zeros((2, 2))},
     r"^Transformer/encoderblock/LayerNorm_0/bias has shape \(2, 2\), expected a leading depth"),
    ({"pos_embedding": np.zeros((4, 8)), "cls": np.zeros((1, 1, 8))},
     r"^pos_embedding has shape \(4, 8\), expected a 3-D \(1, patches, hidden\) table$"),
])
def test_malformed_variants_name_the_key(arrays, message):
  with pytest.raises(npz_layout.LayoutError, match=message):
    npz_layout.to_released_layout(arrays)


def test_infer_architecture_names_a_key_of_the_wrong_rank():
  flat = {"embedding/kernel": np.zeros((16, 16, 3, 8)),
          "Transformer/encoderblock_0/LayerNorm_0/scale": np.zeros(8),
          "Transformer/encoderblock_0/MultiHeadDotProductAttention_1/query/kernel":
              np.zeros((8, 2, 4)),
          "Transformer/encoderblock_0/MlpBlock_3/Dense_0/kernel": np.zeros((8, 16)),
          npz_layout.POSEMB: np.zeros((1, 5, 8))}
  npz_layout.infer_architecture(flat)
  with pytest.raises(npz_layout.LayoutError, match=r"^embedding/kernel has shape \(\), expected "
                     r"a 4-D \(patch, patch, channels, hidden\) kernel$"):
    npz_layout.infer_architecture({**flat, "embedding/kernel": np.float32(1)})
  query = "Transformer/encoderblock_0/MultiHeadDotProductAttention_1/query/kernel"
  with pytest.raises(npz_layout.LayoutError, match=r"query/kernel has shape \(8, 3, 4\), "
                     "expected .* hidden size 8$"):
    npz_layout.infer_architecture({**flat, query: np.zeros((8, 3, 4))})
  with pytest.raises(npz_layout.LayoutError, match=r"^conv_root/kernel has 48 filters, expected "
                     "a multiple of GroupNorm's 32 groups$"):
    npz_layout.infer_architecture({**flat, "conv_root/kernel": np.zeros((7, 7, 3, 48))})


def test_stacked_blocks_of_the_wrong_rank_fail_as_one_line(released_fixtures, tmp_path):
  arrays = scan_stacked(dict(np.load(released_fixtures / "vit-ti16.npz")))
  arrays["Transformer/encoderblock/LayerNorm_0/scale"] = np.float32(1)
  np.savez(tmp_path / "stacked.npz", **arrays)
  with pytest.raises(CheckpointError) as e:
    load_npz(tmp_path / "stacked.npz")
  assert str(e.value) == (
      f"{tmp_path / 'stacked.npz'} is not a usable ViT checkpoint: Transformer/encoderblock/"
      "LayerNorm_0/scale has shape (), expected a leading depth axis of 12 like the other "
      "stacked blocks (the file is damaged or was edited: save it again from the model)")
