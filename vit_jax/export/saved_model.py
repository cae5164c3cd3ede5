"""TensorFlow SavedModel through jax2tf with native serialization: the model's StableHLO
inside an XlaCallModule op, weights as TF variables (variables/), and a serving
signature `serving_default`: images -> {logits, probabilities}, batch dynamic unless
--batch=N. With --with_preprocessing, `images` are encoded image bytes (tf.string [B])
decoded, resized and scaled in the graph (see preprocessing), so clients send files.

Reload: tf.saved_model.load(OUT + "/saved_model").signatures["serving_default"](images=x);
TensorFlow Serving serves the folder as one version of a model.
"""

import os
from typing import Any, Dict, Optional, Tuple

import numpy as np
import tensorflow as tf
from jax.experimental import jax2tf

from vit_jax.export import source as source_lib

DIR = "saved_model"
SIGNATURE = "serving_default"
RUNTIME = f"TensorFlow {tf.__version__} (tf.saved_model.load, {SIGNATURE})"
# float32: the same StableHLO, compiled by TensorFlow's XLA. bfloat16: the two XLA builds
# fuse differently and so round activations to bfloat16 (2^-8 relative each time) at
# other points of the 12+ blocks: measured 1e-2 on ViT-Ti/16, hence 5e-2.
TOLERANCE = {"float32": 1e-5, "bfloat16": 5e-2}
REFUSED = {"dtype=float16": "float16 weights are a TFLite option; use float32 or bfloat16"}


def serving_module(source: source_lib.Source, batch: Optional[int], with_preprocessing: bool,
                   platforms=source_lib.PLATFORMS) -> tf.Module:
  """A tf.Module holding the weights as variables and the serving function."""
  specs = source.input_specs(batch)
  module = tf.Module()
  module.params = tf.nest.map_structure(tf.Variable, source.params)
  shapes = {name: "(" + ", ".join(["b", *map(str, shape[1:])]) + ")" if batch is None else None
            for name, (shape, _) in specs.items()}
  logits_of = jax2tf.convert(
      source.apply, with_gradient=False, native_serialization_platforms=platforms,
      polymorphic_shapes=[None, shapes if source.max_patches else shapes["images"]])

  def outputs(*inputs):
    named = dict(zip(specs, inputs))
    logits = logits_of(module.params, named if source.max_patches else named["images"])
    return {"logits": logits, "probabilities": getattr(tf.nn, source.activation)(logits)}

  if with_preprocessing:
    from vit_jax.export import preprocessing
    signature = [tf.TensorSpec([batch], tf.string, name="images")]
    serve = lambda images: outputs(preprocessing.images_from_bytes(images, source.image_size))
  else:
    signature = [tf.TensorSpec(shape, tf.as_dtype(dtype), name=name)
                 for name, (shape, dtype) in specs.items()]
    serve = outputs
  module.serve = tf.function(serve, input_signature=signature, autograph=False)
  return module


def save(module: tf.Module, path: str) -> None:
  tf.saved_model.save(module, path, signatures={SIGNATURE: module.serve})


def write(source: source_lib.Source, options, directory: str) -> Tuple[Dict, Dict[str, Any]]:
  save(serving_module(source, options.batch, options.with_preprocessing),
       os.path.join(directory, DIR))
  classes = source.module.num_classes
  inputs = ({"images": {"shape": [options.batch], "dtype": "string", "content": "encoded "
                        "JPEG, PNG, GIF or BMP bytes, one image per element"}}
            if options.with_preprocessing else source_lib.describe_inputs(source, options.batch))
  signature = {"name": SIGNATURE, "inputs": inputs,
               "outputs": {"logits": {"shape": [options.batch, classes], "dtype": "float32"},
                           "probabilities": {"shape": [options.batch, classes],
                                             "dtype": "float32"}},
               "platforms": list(source_lib.PLATFORMS)}
  return {"model": DIR}, signature


def run(directory: str, inputs) -> np.ndarray:
  """The logits of `inputs`: images (or encoded bytes), or a dict of NaFlex inputs."""
  serve = tf.saved_model.load(os.path.join(directory, DIR)).signatures[SIGNATURE]
  if isinstance(inputs, dict):
    return serve(**{k: tf.constant(v) for k, v in inputs.items()})["logits"].numpy()
  return serve(images=tf.constant(list(inputs) if inputs.dtype == object else inputs)
               )["logits"].numpy()
