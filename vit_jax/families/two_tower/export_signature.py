"""How a two-tower model is exported (the family contract's ExportSignature part): its image
tower (images [B, side, side, 3] float32 in [-1, 1] -> L2-normalised embeddings) and its
text tower (token ids [B, L] int32 -> L2-normalised embeddings) as two artefacts,
OUT/image_tower/ and OUT/text_tower/ (a NaFlex folder's image tower takes NaFlex's
patches, mask and grid at its processor's budget), the tokenizer file copied beside them and
metadata.json saying how to combine them: logits = logit_scale * zimg @ ztxt.T
(+ logit_bias), read with a softmax over the texts (LiT) or a sigmoid per pair (SigLIP)."""

import os
from typing import Optional

import numpy as np

from vit_jax.base import errors, image_sizes
from vit_jax.data import naflex_patches
from vit_jax.families.two_tower import npz_file, opening
from vit_jax.families.two_tower import model as two_tower
from vit_jax.families.vit import naflex_model as vit_naflex_model
from vit_jax.models import family_contract

FORMATS = ("stablehlo", "onnx")  # the formats vit_jax.export writes functions in


def check_options(to: str, *, image_size, dtype: str, with_preprocessing: bool,
                  max_patches: Optional[int]) -> None:
  """What a two-tower export cannot do, refused in one line before the load."""
  if max_patches:
    raise errors.InvalidInput("--max_patches exports a NaFlex classifier (params.npz of a "
                              "fine-tuned tower), not a two-tower model: a NaFlex folder's "
                              "towers export at its processor's budget (--image_size=SIDE "
                              "for square images)")
  if to not in FORMATS:
    raise errors.InvalidInput(f"a two-tower model exports --to={' or '.join(FORMATS)} "
                              f"(image and text tower apart), not {to}")
  if dtype != "float32" or with_preprocessing:
    option = "with_preprocessing" if with_preprocessing else f"dtype={dtype}"
    raise errors.InvalidInput(f"a two-tower export does not support {option}: export "
                              "float32 towers that take preprocessed images")
  if image_size and len(set(image_sizes.side_pair(image_size))) > 1:
    raise errors.InvalidInput(f"a two-tower image tower takes square images, got "
                              f"--image_size={image_size}")


def load(checkpoint: str, *, image_size) -> family_contract.ExportedModel:
  """The two towers of a released name (fetched first), .npz or Hugging Face folder; a
  NaFlex folder's image tower takes NaFlex inputs at its budget unless image_size asks
  for square images."""
  path = opening.local_checkpoint(checkpoint)
  model, params, info = npz_file.load_two_tower(path)  # the tokenizer is copied, not read
  budget = None if image_size else info.max_patches
  side = opening.image_size(info, image_size and image_sizes.side_pair(image_size)[0])
  variables = {"params": params}
  tokenizer = info.tokenizer and os.path.basename(info.tokenizer)
  image_tower = (_naflex_tower(model, params, info, budget) if budget else
                 family_contract.ExportedFunction(
                     "image_tower", lambda x: model.apply(variables, x, method=model.embed_images),
                     params["img"], "images", (side, side, 3), "float32", (-1.0, 1.0),
                     "embeddings"))
  towers = (
      image_tower,
      family_contract.ExportedFunction(
          "text_tower", lambda t: model.apply(variables, t, method=model.embed_texts),
          params["txt"], "tokens", (info.text_length,), "int32", (0, model.txt.vocab_size),
          "embeddings", {"tokenizer": tokenizer}))
  images = (f"NaFlex images in {budget} patches" if budget
            else f"images {side}x{side} px")

  def describe(entries):
    return {
        "model": "two-tower", "family": info.family,
        "image_size": None if budget else [side, side], "max_patches": budget,
        "towers": dict(entries), "embeddings": "L2-normalised",
        "logit_scale": float(np.exp(np.asarray(params["t"])[0])),
        "logit_bias": float(np.asarray(params["b"])[0]) if "b" in params else None,
        "logits": "logit_scale * image_embeddings @ text_embeddings.T + logit_bias (if any)",
        "scores": ("softmax over the texts" if info.family == "lit"
                   else "sigmoid of each (image, text) logit")}

  return family_contract.ExportedModel(
      path, f"{info.family} two-tower model, {images}, {info.text_length} tokens",
      "embedding", towers, {tokenizer: info.tokenizer} if tokenizer else {}, describe)


# The NaFlex image tower is checked on noise images of these (height, width), in turn.
_CHECK_SHAPES = ((40, 20), (20, 48), (33, 33), (17, 29))


def _naflex_tower(model, params, info, budget: int) -> family_contract.ExportedFunction:
  """The image tower on NaFlex inputs ({'patches', 'mask', 'grid'}, as
  vit_jax.data.naflex_patches.patchify gives them at the budget) -> embeddings, as zeroshot
  reads the folder."""
  patch = model.img.patch_size
  tower = vit_naflex_model.from_vit(model.img, info.image_size // patch)

  def draw(rows: int):
    rng = np.random.default_rng(0)
    items = [naflex_patches.patchify(rng.integers(0, 256, (*_CHECK_SHAPES[i % 4], 3), np.uint8),
                                     patch, budget) for i in range(rows)]
    return {name: np.stack(part) for name, part in zip(("patches", "mask", "grid"),
                                                      zip(*items))}

  inputs = family_contract.NamedInputs(
      {"patches": ((budget, patch * patch * 3), "float32"), "mask": ((budget,), "int32"),
       "grid": ((2,), "int32")}, draw,
      f"noise images of {len(_CHECK_SHAPES)} aspect ratios, seed 0, patchified by "
      "vit_jax.data.naflex_patches")
  preprocessing = (f"each image: vit_jax.data.naflex_patches.patchify(uint8 image, {patch}, "
                   f"{budget}) (transformers' Siglip2ImageProcessor at max_num_patches="
                   f"{budget}): resized at its aspect ratio to the largest grid of {patch} px "
                   f"patches within {budget}, [-1, 1], patches flattened (row, column, "
                   "channel), zero-padded; mask 1 on the real patches; grid (rows, columns)")
  return family_contract.ExportedFunction(
      "image_tower", lambda x: two_tower.normalize(tower.apply({"params": params["img"]}, x)),
      params["img"], "naflex", (), "float32", (0.0, 0.0), "embeddings",
      {"preprocessing": preprocessing}, inputs)
