"""Tiny two-tower models for the tests, and random parameters without running their init
(eagerly each op of a new model compiles; jitted, the random init compiles per array: both
cost seconds): N(0, 1/fan_in) kernels, scales 1 + N(0, 0.1), everything else N(0, 0.1), so
that a wrongly mapped array changes the outputs."""

import jax
import jax.numpy as jnp
import numpy as np
from flax import traverse_util

from vit_jax.families.two_tower import text_tower
from vit_jax.families.two_tower import model as two_tower
from vit_jax.families.vit import model as vit

IMAGE_SIZE = 32


def tiny_siglip(vocab_size=50, max_len=8, width=16):
  img = vit.VisionTransformer(num_classes=0, patch_size=8, hidden_size=width, mlp_dim=32,
                              num_heads=2, num_layers=2, classifier="map")
  txt = text_tower.TextTransformer(width, width, 2, 24, 4, vocab_size=vocab_size,
                                   max_len=max_len)
  return two_tower.TwoTower(img, txt, bias_init=-10.0, temperature_init=10.0)


def tiny_lit_bert(vocab_size=50, heads=2):
  img = vit.VisionTransformer(num_classes=12, patch_size=8, hidden_size=16, mlp_dim=32,
                              num_heads=2, num_layers=1)
  txt = text_tower.BertTextEncoder(12, 16, 2, 32, heads, vocab_size=vocab_size, max_length=20)
  return two_tower.TwoTower(img, txt, image_head=True)


def random_params(model, text_length, seed=0):
  """{'params': ...} for `model` (see the module docstring)."""
  shapes = jax.eval_shape(model.init, jax.random.PRNGKey(0),
                          jnp.zeros((1, IMAGE_SIZE, IMAGE_SIZE, 3)),
                          jnp.ones((1, text_length), jnp.int32))["params"]
  rng = np.random.default_rng(seed)
  flat = {}
  for key, shape in traverse_util.flatten_dict(shapes, sep="/").items():
    value = rng.standard_normal(shape.shape, np.float32)
    if key.endswith("kernel"):
      value *= np.float32(1 / np.sqrt(np.prod(shape.shape[:-1]) if len(shape.shape) == 2
                                      else shape.shape[0]))
    elif key.endswith("scale"):
      value = 1 + np.float32(0.1) * value
    elif key in ("t",):
      value = np.full(shape.shape, np.log(10.0), np.float32)
    else:
      value = np.float32(0.1) * value
    flat[key] = value
  return {"params": traverse_util.unflatten_dict(flat, sep="/")}


def logits(model, params, images, tokens):
  """The model's [images, texts] logits, jitted (one compile instead of one per op)."""
  return np.asarray(jax.jit(lambda p, x, t: model.apply(p, x, t)[2])(params, images, tokens))


def save_tiny_lit(folder, words=("china", "flower", "cat")):
  """A random LiT model (1-block ViT, 1-head BERT: what a width-16 BERT is read as) saved
  as folder/LiT-tiny.npz with its WordPiece vocabulary beside it -> (path, model, params)."""
  from vit_jax.families.two_tower import (  # pylint: disable=import-outside-toplevel
      npz_file as two_tower_load)
  img = vit.VisionTransformer(num_classes=0, patch_size=8, hidden_size=16, mlp_dim=32,
                              num_heads=2, num_layers=1)
  txt = text_tower.BertTextEncoder(16, 16, 1, 32, 1, vocab_size=12, max_length=16)
  model = two_tower.TwoTower(img, txt)
  params = random_params(model, 16)
  path = str(folder / "LiT-tiny.npz")
  two_tower_load.save_two_tower(params, path)
  (folder / "LiT-tiny.txt").write_text("\n".join(
      ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "a", "photo", "of", *words]) + "\n")
  return path, model, params


DIGIT_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")


def save_digits_pair(folder):
  """A random tiny SigLIP pair saved as folder/pair.npz with a WordPiece vocabulary beside
  it (pair.txt, where zeroshot finds it), and the digits' test split written as 8 x 8 PNGs,
  folder/digits/test/<digit>/<index>.png (the pixels of the in-memory split, in its order)
  -> (module, params, npz path, digits folder)."""
  from PIL import Image  # pylint: disable=import-outside-toplevel
  from vit_jax.data.sources import digits  # pylint: disable=import-outside-toplevel
  from vit_jax.families.two_tower import (  # pylint: disable=import-outside-toplevel
      npz_file as two_tower_load)
  model = tiny_siglip()
  params = random_params(model, 8)["params"]
  path = str(folder / "pair.npz")
  two_tower_load.save_two_tower(params, path)
  (folder / "pair.txt").write_text("\n".join(
      ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "a", "photo", "of", "the", "number",
       *DIGIT_WORDS]) + "\n")
  _, test, names = digits.digits_source()
  for index, (pixels, label) in enumerate(zip(test.data, test.labels)):
    target = folder / "digits" / "test" / names[label]
    target.mkdir(parents=True, exist_ok=True)
    Image.fromarray(pixels).save(target / f"{index:03d}.png")
  return model, params, path, str(folder / "digits")


def save_siglip2_folder(folder, model, params):
  """A SigLIP-shaped pair saved as a Hugging Face Siglip2Model (NaFlex) folder: config.json
  (model_type siglip2, a Linear patch embedding, its table's patches) and model.safetensors,
  without a preprocessor_config.json (read at 256 patches) -> the folder's path."""
  import json  # pylint: disable=import-outside-toplevel
  from safetensors.numpy import save_file  # pylint: disable=import-outside-toplevel
  from vit_jax.families.two_tower import hf_layout  # pylint: disable=import-outside-toplevel
  config = hf_layout.config_for(model, IMAGE_SIZE)
  config["model_type"] = "siglip2"
  del config["vision_config"]["image_size"]
  config["vision_config"]["num_patches"] = (IMAGE_SIZE // model.img.patch_size) ** 2
  folder.mkdir(parents=True)
  (folder / "config.json").write_text(json.dumps(config))
  params = params.get("params", params)
  save_file(hf_layout.to_hf(traverse_util.flatten_dict(params, sep="/"), config),
            str(folder / "model.safetensors"))
  return str(folder)
