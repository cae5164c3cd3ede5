"""The classification objective: losses (smoothing, sigmoid, soft labels), masked eval sums."""

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from conftest import init_params, tiny_model
from vit_jax.objectives import classification

NUM_CLASSES = 5


def make_config(**overrides) -> ml_collections.ConfigDict:
  return ml_collections.ConfigDict({"loss": "softmax_xent", "label_smoothing": 0.0, **overrides})


def make_batch(size):
  image_key, label_key = jax.random.split(jax.random.PRNGKey(0))
  return {"image": jax.random.uniform(image_key, (size, 16, 16, 3), minval=-1, maxval=1),
          "label": jax.random.randint(label_key, (size,), 0, NUM_CLASSES)}


def log_softmax(x):
  return x - np.log(np.sum(np.exp(x), axis=-1, keepdims=True))


LOGITS = np.array([[2.0, 0.0, -1.0], [0.5, 0.5, -3.0]], np.float32)


def test_label_smoothing_matches_hand_computation():
  loss_fn = classification.make_loss_fn(make_config(label_smoothing=0.3))
  smoothed = np.array([[0.8, 0.1, 0.1], [0.1, 0.1, 0.8]])  # 0.7 * one_hot + 0.3 / 3
  expected = -np.sum(smoothed * log_softmax(LOGITS), axis=-1)
  np.testing.assert_allclose(loss_fn(LOGITS, np.array([0, 2])), expected, rtol=1e-6)


def test_sigmoid_xent_sums_classes_per_example():
  loss_fn = classification.make_loss_fn(make_config(loss="sigmoid_xent"))
  labels = np.array([[1.0, 0.0, 0.0], [0.0, 0.0, 1.0]])
  prob = 1.0 / (1.0 + np.exp(-LOGITS.astype(np.float64)))
  expected = -np.sum(labels * np.log(prob) + (1 - labels) * np.log(1 - prob), axis=-1)
  np.testing.assert_allclose(loss_fn(LOGITS, np.array([0, 2])), expected, rtol=1e-6)
  np.testing.assert_allclose(loss_fn(LOGITS, labels), expected, rtol=1e-6)


def test_soft_labels_give_the_mixed_cross_entropy():
  loss_fn = classification.make_loss_fn(make_config())
  mixed = np.array([[0.7, 0.3, 0.0], [0.0, 0.4, 0.6]], np.float32)
  expected = -np.sum(mixed * log_softmax(LOGITS), axis=-1)
  np.testing.assert_allclose(loss_fn(LOGITS, mixed), expected, rtol=1e-6)


def test_unknown_loss_fails_with_the_valid_choices():
  with pytest.raises(ValueError, match="config.loss='l2'; choose one of softmax_xent"):
    classification.make_loss_fn(make_config(loss="l2"))


def test_eval_sums_count_only_unmasked_rows():
  model = tiny_model(NUM_CLASSES)
  params = init_params(model)
  eval_step = jax.jit(classification.make_eval_step(model))
  real = make_batch(4)
  padded = {"image": jnp.concatenate([real["image"], jnp.full((2, 16, 16, 3), 5.0)]),
            "label": jnp.concatenate([real["label"], jnp.array([0, 0])]),
            "mask": jnp.array([1.0, 1, 1, 1, 0, 0])}
  sums = jax.device_get(eval_step(params, padded))

  logits = np.asarray(model.apply({"params": params}, real["image"]), np.float64)
  labels = np.asarray(real["label"])
  expected_loss = -np.sum(log_softmax(logits)[np.arange(4), labels])
  assert sums["examples"] == 4.0
  assert sums["correct"] == np.sum(np.argmax(logits, axis=-1) == labels)
  assert sums["loss_sum"] == pytest.approx(expected_loss, rel=1e-5)


