"""Tiny checkpoints, inputs and comparisons shared by the conversion tests
(test_interop.py without PyTorch, test_interop_torch.py against timm and transformers)."""

import jax
import numpy as np
from safetensors.numpy import load_file

from conftest import random_params, tiny_model
from vit_jax import load_npz, save_npz

IMAGE = 16


def saved(module, params, path):
  save_npz(params, path)
  return path


def tiny_file(tmp_path, name="tiny.npz", seed=0, **overrides):
  module = tiny_model(**overrides)
  return saved(module, random_params(module, IMAGE, seed), tmp_path / name)


def logits(path, x):
  module, params = load_npz(path)
  return np.asarray(jax.jit(module.apply)({"params": params}, x))


def images(side=IMAGE, batch=2, seed=0):
  return np.random.default_rng(seed).uniform(-1, 1, (batch, side, side, 3)).astype(np.float32)


def relative_error(ours, truth):
  return float(np.max(np.abs(ours - truth)) / np.max(np.abs(truth)))


def shapes(path):
  return {k: v.shape for k, v in load_file(str(path)).items()}
