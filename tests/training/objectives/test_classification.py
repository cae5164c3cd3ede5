"""The classification objective: losses (smoothing, sigmoid, soft labels), masked eval sums."""

import dataclasses

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from conftest import init_params, tiny_model
from vit_jax.data.tf_stack import tf_pipeline
from vit_jax.training.objectives import classification

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




def test_class_weights_weigh_examples_in_softmax_and_positives_in_sigmoid():
  weights = [2.0, 0.5, 1.0]
  softmax = classification.make_loss_fn(make_config(class_weights=weights))
  plain = -log_softmax(LOGITS)[[0, 1], [0, 2]]
  np.testing.assert_allclose(softmax(LOGITS, np.array([0, 2])), plain * [2.0, 1.0], rtol=1e-6)
  multi_hot = np.array([[1, 1, 0], [0, 0, 0]], np.int32)  # weighs the mean of its classes'
  np.testing.assert_allclose(softmax(LOGITS, multi_hot)[0],
                             -1.25 * np.sum(multi_hot[0] * log_softmax(LOGITS)[0]), rtol=1e-6)
  sigmoid = classification.make_loss_fn(make_config(loss="sigmoid_xent", class_weights=weights))
  p = 1 / (1 + np.exp(-LOGITS.astype(np.float64)))
  expected = -np.sum(np.array(weights) * multi_hot * np.log(p)
                     + (1 - multi_hot) * np.log(1 - p), axis=-1)
  np.testing.assert_allclose(sigmoid(LOGITS, multi_hot), expected, rtol=1e-5)
  unweighted = classification.make_loss_fn(make_config(loss="sigmoid_xent",
                                                       class_weights=[1.0] * 3))
  np.testing.assert_allclose(unweighted(LOGITS, multi_hot), classification.make_loss_fn(
      make_config(loss="sigmoid_xent"))(LOGITS, multi_hot), rtol=1e-6)


def test_balanced_weights_are_sklearns_and_resolve_from_the_data():
  from sklearn.utils import class_weight  # pylint: disable=import-outside-toplevel
  labels = np.array([0, 0, 0, 0, 1, 2, 2, 3, 3, 3])
  expected = class_weight.compute_class_weight("balanced", classes=np.arange(4), y=labels)
  counts = np.bincount(labels).tolist()
  np.testing.assert_allclose(classification.balanced_weights(counts), expected, rtol=1e-12)

  info = tf_pipeline.DatasetInfo(4, 10, 3, list("abcd"), multi_label=True,
                              train_class_counts=counts)
  config = make_config(loss="auto", class_weights="balanced")
  classification.resolve(config, info)
  assert config.loss == "sigmoid_xent"  # auto, for multi-label data
  np.testing.assert_allclose(config.class_weights, expected)
  single = make_config(loss="auto", class_weights=None)
  classification.resolve(single, dataclasses.replace(info, multi_label=False))
  assert single.loss == "softmax_xent" and single.class_weights is None


@pytest.mark.parametrize("weights, message", [
    ([1.0, 2.0], "has 2 weights but the dataset has 4 classes"),
    ("inverse", "give 'balanced' or a list of finite numbers >= 0"),
    ([1.0, -1.0, 1.0, 1.0], "give 'balanced' or a list of finite numbers >= 0"),
    ([1.0, float("nan"), 1.0, 1.0], "give 'balanced' or a list of finite numbers >= 0"),
    ([1.0, float("inf"), 1.0, 1.0], "give 'balanced' or a list of finite numbers >= 0"),
    ([0, 0, 0, 0.0], r"config.class_weights=\[0, 0, 0, 0.0\] are all 0: every loss would "
     "be 0 and nothing would train"),
])
def test_bad_class_weights_are_refused(weights, message):
  info = tf_pipeline.DatasetInfo(4, 10, 3, list("abcd"), train_class_counts=[1, 2, 3, 4])
  with pytest.raises(ValueError, match=message):
    classification.resolve(make_config(class_weights=weights), info)


def test_labels_on_every_train_image_are_refused_or_named(caplog):
  """Every label on every image: nothing to learn, mAP 1.0 by construction (refused). One
  label on every image: learned as a constant, its AP meaningless (warned by name)."""
  every = tf_pipeline.DatasetInfo(3, 8, 4, list("abc"), multi_label=True,
                               train_class_counts=[8, 8, 8])
  with pytest.raises(ValueError, match="every one of the 8 training images carries every "
                     r"label \('a', 'b', 'c'\): there is nothing to learn and mAP would be 1.0"):
    classification.resolve(make_config(loss="auto"), every)
  one = dataclasses.replace(every, train_class_counts=[8, 3, 0])
  classification.resolve(make_config(loss="auto"), one)
  assert "label(s) 'a' are on every one of the 8 training images" in caplog.text
  single = dataclasses.replace(every, multi_label=False, train_class_counts=[8, 0, 0])
  classification.resolve(make_config(loss="auto"), single)  # one class only: its own check


@pytest.mark.parametrize("settings, message", [
    ({"loss": "hinge"}, "unknown config.loss='hinge'"),
    ({"class_weights": 2.0}, "give 'balanced' or a list"),
    ({"class_weights": (0, 0)}, "are all 0"),
    ({"threshold": 1.5}, "config.threshold=1.5 must be in \\[0, 1\\]"),
])
def test_loss_settings_are_refused_before_any_data(settings, message):
  with pytest.raises(ValueError, match=message):
    classification.Classification().check(make_config(**{"loss": "auto", **settings}))


def test_balanced_weights_need_counts():
  info = tf_pipeline.DatasetInfo(4, 10, 3, list("abcd"))  # a streamed train split: no counts
  with pytest.raises(ValueError, match="'balanced' needs the train split's class counts"):
    classification.resolve(make_config(class_weights="balanced"), info)
