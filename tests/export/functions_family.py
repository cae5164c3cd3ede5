"""A test family declared through the contract alone (vit_jax.models.family_contract) whose
checkpoints, `*.pair.npz` files, are no classifier: two functions, `project` (images
[2, 2, 3] -> 3 values) and `lookup` (tokens [5] -> 3 values), exported as two artefacts
(ExportSignature) and timed as two parts (BenchmarkParts). register() adds it for a test;
unregister() removes it."""

import os
from typing import Optional

import jax.numpy as jnp
import numpy as np

from vit_jax.base import errors
from vit_jax.models import family_contract, family_registry

SUFFIX = ".pair.npz"
VOCABULARY = 10  # token ids in [0, VOCABULARY)
TOKENS = 5
SIDE = 2


class Names:
  """The Names part of a family with no released names: its models come from files."""

  @staticmethod
  def released():
    return []

  @staticmethod
  def spellings():
    return []

  @staticmethod
  def canonical(name):
    del name


def write_checkpoint(path: str, seed: int = 0) -> None:
  """A checkpoint of the family (its two functions' weights) and the vocabulary beside it."""
  rng = np.random.default_rng(seed)
  np.savez(path, w=rng.normal(size=(SIDE * SIDE * 3, 3)).astype(np.float32),
           table=rng.normal(size=(VOCABULARY, 3)).astype(np.float32))
  with open(path[:-len(SUFFIX)] + ".vocab", "w", encoding="utf-8") as f:
    f.write("\n".join(map(str, range(VOCABULARY))))


def project(params, images):
  return images.reshape(images.shape[0], -1) @ params["w"]


def lookup(params, tokens):
  return jnp.take(params["table"], tokens, axis=0).sum(1)


def _params(checkpoint: str):
  with np.load(checkpoint) as arrays:
    return {name: arrays[name] for name in arrays.files}


class ExportSignature:
  """Float32 only; the vocabulary file copied beside the two functions."""

  @staticmethod
  def check_options(to, *, image_size, dtype, with_preprocessing, max_patches):
    del to, image_size, with_preprocessing, max_patches
    if dtype != "float32":
      raise errors.InvalidInput(f"a pair of functions exports float32, not {dtype}")

  @staticmethod
  def load(checkpoint, *, image_size):
    del image_size
    params = _params(checkpoint)
    vocabulary = checkpoint[:-len(SUFFIX)] + ".vocab"
    functions = (
        family_contract.ExportedFunction(
            "project", lambda x: project(params, x), {"w": params["w"]}, "images",
            (SIDE, SIDE, 3), "float32", (-1.0, 1.0), "values"),
        family_contract.ExportedFunction(
            "lookup", lambda t: lookup(params, t), {"table": params["table"]}, "tokens",
            (TOKENS,), "int32", (0, VOCABULARY), "values", {"vocabulary": "pair.vocab"}))
    return family_contract.ExportedModel(
        checkpoint, "a pair of functions", "value", functions,
        {"pair.vocab": vocabulary}, lambda entries: {"model": "pair", "functions": entries})


class BenchmarkParts:
  timed = "its two functions"

  @staticmethod
  def load(checkpoint, *, batch: int, image_size: Optional[int], dtype: str):
    del image_size, dtype
    params = _params(checkpoint)
    rng = np.random.default_rng(0)
    return family_contract.TimedModel("pair", (
        family_contract.TimedPart("project", SIDE, project, params,
                                  rng.uniform(-1, 1, (batch, SIDE, SIDE, 3)).astype(np.float32)),
        family_contract.TimedPart("lookup", TOKENS, lookup, params,
                                  rng.integers(0, VOCABULARY, (batch, TOKENS)).astype(np.int32))))


FAMILY = family_contract.Family(
    name="pair", title="pair-of-functions", guide="tests/export/functions_family.py",
    module_types=(), names=Names, words=r"functions_family",
    claims=lambda checkpoint: checkpoint.endswith(SUFFIX) and os.path.isfile(checkpoint),
    export_signature=ExportSignature, benchmark_parts=BenchmarkParts,
    refusals={"plan": " model: the main job trains none"})


def register() -> None:
  family_registry.register(FAMILY)


def unregister() -> None:
  family_registry.unregister(FAMILY.name)
