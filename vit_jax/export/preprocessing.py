"""The image-bytes contract of --with_preprocessing, in TensorFlow: a batch of encoded
images (JPEG, PNG, GIF, BMP) -> the model's input, exactly as python -m vit_jax.predict
prepares a file (vit_jax.data.tf_stack.tf_preprocess: decode to RGB, bilinear resize to the model's
side without crop, scale to [-1, 1])."""

import numpy as np
import tensorflow as tf

from vit_jax.data.tf_stack import tf_preprocess


def images_from_bytes(encoded: tf.Tensor, image_size) -> tf.Tensor:
  """[B] tf.string -> [B, height, width, 3] float32 in [-1, 1] for image_size (h, w)."""
  def one(image_bytes):
    return tf_preprocess.eval_resize(tf_preprocess.decode_image(image_bytes), image_size)
  return tf.map_fn(one, encoded, fn_output_signature=tf.TensorSpec(
      [*image_size, 3], tf.float32))


def verification_jpegs(batch: int, image_size, seed: int) -> np.ndarray:
  """[batch] encoded JPEGs of smooth random pictures, not square and not at the model's
  side, so that decoding and resizing are both exercised."""
  rng = np.random.default_rng(seed)
  height, width = image_size[0] + image_size[0] // 2 + 1, image_size[1] + 3
  small = rng.uniform(0, 255, (batch, 8, 8, 3)).astype(np.float32)
  pictures = tf.cast(tf.image.resize(small, [height, width]), tf.uint8)
  return np.array([tf.io.encode_jpeg(p, quality=90).numpy() for p in pictures], dtype=object)


def preprocess_eagerly(encoded: np.ndarray, image_size) -> np.ndarray:
  """The same preprocessing outside any graph: the reference for the exported one."""
  return images_from_bytes(tf.constant(list(encoded)), image_size).numpy()
