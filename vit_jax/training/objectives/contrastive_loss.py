"""The image-text contrastive losses over the global batch, in float32.

  * sigmoid (SigLIP, Zhai et al. 2023; big_vision's trainers/proj/image_text/siglip.py):
    every (image, text) pair of the batch is its own binary problem, logits
    exp(t) * zimg @ ztxt.T + b, label +1 for an image's own text, -1 for the others; the
    loss is -log_sigmoid(label * logit) summed over each image's row and averaged over
    the images (transformers' SiglipModel sums each text's row and averages over the texts:
    the same number, the labels being symmetric);
  * softmax (CLIP; LiT's lit_coco.py): the mean of the image->text and text->image
    cross-entropies of exp(t) * zimg @ ztxt.T, an example's own pair the target.

The embeddings come normalised; t and b are the model's scalars (shape () or (1,)).
chunked_sigmoid_loss is the sigmoid loss with the same value and gradients whose devices
never hold the global x global logits: the paper's ring of text embeddings.
"""

import math
from typing import Callable, Optional

import jax
import jax.numpy as jnp
import ml_collections
from jax.sharding import PartitionSpec as P

from vit_jax.base import config_checks
from vit_jax.training import sharding

LOSSES = ("sigmoid", "softmax")
FLOAT32_BYTES = 4


def _float32(*arrays):
  return tuple(jnp.asarray(x, jnp.float32) for x in arrays)


def _products(zimg, ztxt, t):
  """exp(t) * zimg @ ztxt.T at HIGHEST precision, so that TPUs and GPUs multiply in float32
  too rather than in bfloat16 or TF32 passes (a small product next to the towers'), and
  every layout adds up the same numbers."""
  scale = jnp.exp(jnp.reshape(t, ()))
  return scale * jnp.dot(zimg, ztxt.T, precision=jax.lax.Precision.HIGHEST)


def _labels(shape, own):
  """+1 on the diagonal of the block that pairs images with their own texts, else -1."""
  return jnp.where(own & jnp.eye(*shape, dtype=bool), 1.0, -1.0)


def _sigmoid_sum(images, texts, t, b, own):
  """-log_sigmoid(label * logit) summed over a block of pairs."""
  logits = _products(images, texts, t) + jnp.reshape(b, ())
  return -jnp.sum(jax.nn.log_sigmoid(_labels(logits.shape, own) * logits))


def sigmoid_loss(zimg, ztxt, t, b):
  """The sigmoid loss of images zimg [B, D] and their texts ztxt [B, D] from the global
  B x B logits. On n devices XLA gathers all texts to each and splits the logits by rows,
  [B/n, B] per device."""
  return _sigmoid_sum(*_float32(zimg, ztxt, t, b), True) / zimg.shape[0]


def softmax_loss(zimg, ztxt, t):
  """The softmax loss of images zimg [B, D] and their texts ztxt [B, D]. Each image's
  cross-entropy normalises over all B texts and each text's over all B images, so on
  several devices this gathers every image and text embedding to each device."""
  logits = _products(*_float32(zimg, ztxt, t))
  image_to_text = -jnp.diagonal(jax.nn.log_softmax(logits, axis=1))
  text_to_image = -jnp.diagonal(jax.nn.log_softmax(logits, axis=0))
  return jnp.mean((image_to_text + text_to_image) / 2)


def chunked_sigmoid_loss(zimg, ztxt, t, b, mesh: Optional[jax.sharding.Mesh] = None):
  """sigmoid_loss's value and gradients with no device holding more than [B/n, B/n] logits
  and [B/n, D] embeddings at a time (loss_memory_bytes).

  The batch rows are split over the mesh's batch axes (data x fsdp: n devices, as
  sharding.batch_sharding places them). Each device keeps its B/n images while the texts
  travel a ring (jax.lax.ppermute, device j -> j + 1 along the batch axes), n hops: at hop k
  device j holds device (j - k)'s texts, its own at hop 0 (positives on the block's
  diagonal), another device's after (all negatives), and at the end its own again. It adds
  up each [B/n, B/n] block's terms; the devices' sums are added (psum) and divided by B.
  The backward (a custom VJP) runs the same ring: each block is recomputed, its images'
  gradient stays home and its texts' gradient travels along with them, arriving home with
  them. Autodiff through the forward ring kept every hop's texts for the backward, [B, D]
  on every device, as much as gathering them.

  `mesh`: the mesh (or abstract mesh) the batch is split over; None takes the abstract mesh
  the caller traces under (sharding.on_mesh, jitted with the arguments placed on that mesh).
  Without any mesh there is nothing to split: the plain sigmoid_loss.
  """
  mesh = jax.sharding.get_abstract_mesh() if mesh is None else mesh
  if mesh.empty:
    return sigmoid_loss(zimg, ztxt, t, b)
  axes = sharding.BATCH_AXES
  hops = math.prod(mesh.shape[axis] for axis in axes)
  batch = zimg.shape[0]
  ring = [(j, (j + 1) % hops) for j in range(hops)]
  pass_on = lambda x: jax.lax.ppermute(x, axes, ring)
  varying_zeros = lambda shape: jax.lax.pcast(jnp.zeros(shape, jnp.float32), axes, to="varying")

  def device_loss(images, texts, t, b):
    def hop(k, carry):
      total, texts = carry
      return total + _sigmoid_sum(images, texts, t, b, k == 0), pass_on(texts)

    total, _ = jax.lax.fori_loop(0, hops, hop, (varying_zeros(()), texts))
    return jax.lax.psum(total, axes) / batch

  def device_grads(images, texts, t, b, cotangent):
    scale, weight = jnp.exp(jnp.reshape(t, ())), cotangent / batch

    def hop(k, carry):
      d_images, d_t, d_b, texts, d_texts = carry
      products = _products(images, texts, t)
      labels = _labels(products.shape, k == 0)
      # d/dx -log_sigmoid(x) = -sigmoid(-x), x = labels * logits
      d_logits = -weight * labels * jax.nn.sigmoid(-labels * (products + jnp.reshape(b, ())))
      d_images += scale * jnp.dot(d_logits, texts, precision=jax.lax.Precision.HIGHEST)
      d_texts += scale * jnp.dot(d_logits.T, images, precision=jax.lax.Precision.HIGHEST)
      d_t += jnp.sum(d_logits * products)
      d_b += jnp.sum(d_logits)
      return (d_images, d_t, d_b, *pass_on((texts, d_texts)))

    start = (varying_zeros(images.shape), varying_zeros(()), varying_zeros(()), texts,
             varying_zeros(texts.shape))
    d_images, d_t, d_b, _, d_texts = jax.lax.fori_loop(0, hops, hop, start)
    return (d_images, d_texts, jnp.reshape(jax.lax.psum(d_t, axes), t.shape),
            jnp.reshape(jax.lax.psum(d_b, axes), b.shape))

  rows = P(axes, None)
  forward = jax.shard_map(device_loss, mesh=mesh, in_specs=(rows, rows, P(), P()),
                          out_specs=P())
  backward = jax.shard_map(device_grads, mesh=mesh, in_specs=(rows, rows, P(), P(), P()),
                           out_specs=(rows, rows, P(), P()))
  loss = jax.custom_vjp(forward)
  loss.defvjp(lambda *args: (forward(*args), args),
              lambda args, cotangent: backward(*args, cotangent))
  return loss(*_float32(zimg, ztxt, t, b))


def loss_fn(config: ml_collections.ConfigDict) -> Callable:
  """fn(zimg, ztxt, t, b) -> the scalar loss config.contrastive.loss names; the sigmoid one
  chunked over the devices when config.contrastive.chunked (softmax ignores b)."""
  name = config_checks.config_choice(LOSSES, "contrastive.loss", config.contrastive.loss)
  if name == "softmax":
    return lambda zimg, ztxt, t, b: softmax_loss(zimg, ztxt, t)
  return chunked_sigmoid_loss if config.contrastive.chunked else sigmoid_loss


def loss_memory_bytes(batch: int, devices: int, dim: int, chunked: bool) -> int:
  """Peak bytes per device of the sigmoid loss and its gradient for a global batch of
  `batch` pairs split over `devices` (data x fsdp), with `dim`-wide float32 embeddings.

  With r = batch / devices rows per device, in floats:
    * plain: XLA splits the global logits by rows: a device gathers all B texts and holds
      its [r, B] rows three times (the logits, their terms, their gradient): 3 r B + B D,
      growing with B^2 / n;
    * chunked: up to three [r, r] blocks (the products, their gradient, the diagonal's
      mask) and three [r, D] (the visiting texts, their gradient, the images' gradient):
      3 r^2 + 3 r D, growing with B^2 / n^2. A ring of one device holds what the plain
      loss holds.
  Upper bounds of XLA's compiled temporary memory on 1 to 16 CPU devices (jax 0.10.2,
  B = 4096, D = 64 to 1024), at most a third above it.
  """
  rows = batch / devices
  floats = 3 * rows * (rows + dim) if chunked and devices > 1 else 3 * rows * batch + batch * dim
  return int(FLOAT32_BYTES * floats)
