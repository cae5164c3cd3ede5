"""How a two-tower model is exported (the family contract's ExportSignature part): its image
tower (images [B, side, side, 3] float32 in [-1, 1] -> L2-normalised embeddings) and its
text tower (token ids [B, L] int32 -> L2-normalised embeddings) as two artefacts,
OUT/image_tower/ and OUT/text_tower/, the tokenizer file copied beside them and
metadata.json saying how to combine them: logits = logit_scale * zimg @ ztxt.T
(+ logit_bias), read with a softmax over the texts (LiT) or a sigmoid per pair (SigLIP)."""

import os
from typing import Optional

import numpy as np

from vit_jax.base import errors, image_sizes
from vit_jax.families.two_tower import npz_file, opening
from vit_jax.models import family_contract

FORMATS = ("stablehlo", "onnx")  # the formats vit_jax.export writes functions in


def check_options(to: str, *, image_size, dtype: str, with_preprocessing: bool,
                  max_patches: Optional[int]) -> None:
  """What a two-tower export cannot do, refused in one line before the load."""
  if max_patches:
    raise errors.InvalidInput("--max_patches exports a NaFlex classifier (params.npz of a "
                              "fine-tuned tower), not a two-tower model")
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
  """The two towers of a released name (fetched first), .npz or Hugging Face folder."""
  path = opening.local_checkpoint(checkpoint)
  model, params, info = npz_file.load_two_tower(path)  # the tokenizer is copied, not read
  if info.max_patches and not image_size:
    raise errors.InvalidInput(
        f"{checkpoint} is a NaFlex model (read at its own aspect ratio in {info.max_patches} "
        "patches, as its processor does), and a two-tower export takes square images only: "
        "pass --image_size=SIDE to export it for SIDE x SIDE images anyway (its scores then "
        "differ from NaFlex's), or score with python -m vit_jax.zeroshot, which reads it "
        "as NaFlex")
  side = opening.image_size(info, image_size and image_sizes.side_pair(image_size)[0])
  variables = {"params": params}
  tokenizer = info.tokenizer and os.path.basename(info.tokenizer)
  towers = (
      family_contract.ExportedFunction(
          "image_tower", lambda x: model.apply(variables, x, method=model.embed_images),
          params["img"], "images", (side, side, 3), "float32", (-1.0, 1.0), "embeddings"),
      family_contract.ExportedFunction(
          "text_tower", lambda t: model.apply(variables, t, method=model.embed_texts),
          params["txt"], "tokens", (info.text_length,), "int32", (0, model.txt.vocab_size),
          "embeddings", {"tokenizer": tokenizer}))

  def describe(entries):
    return {
        "model": "two-tower", "family": info.family, "image_size": [side, side],
        "towers": dict(entries), "embeddings": "L2-normalised",
        "logit_scale": float(np.exp(np.asarray(params["t"])[0])),
        "logit_bias": float(np.asarray(params["b"])[0]) if "b" in params else None,
        "logits": "logit_scale * image_embeddings @ text_embeddings.T + logit_bias (if any)",
        "scores": ("softmax over the texts" if info.family == "lit"
                   else "sigmoid of each (image, text) logit")}

  return family_contract.ExportedModel(
      path, f"{info.family} two-tower model, images {side}x{side} px, {info.text_length} "
      "tokens", "embedding", towers, {tokenizer: info.tokenizer} if tokenizer else {},
      describe)
