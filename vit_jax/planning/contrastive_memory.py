"""A contrastive config's loss in its plan: the memory the loss over the global batch takes
per device, with and without chunking (vit_jax.training.objectives.contrastive_loss:
loss_memory_bytes), at the config's batch and at big_vision's image-text batch sizes, the
train step's peak at each size estimated from the compiled step, and the largest batch
that fits (by the same arithmetic here; vit_jax.planning.fit_search verifies it by
compiling).

The estimate: a train step's peak per device is about `fixed + per_pair x m + loss(m)`,
m the pairs per device: `fixed` the state, the gradients and the batch
(Programs.fixed_bytes), per_pair the towers' activations (read off the compiled step at
the config's batch, after taking out the loss's own bytes) and loss(m) the loss's, which
grows with m^2 x devices without chunking and with m^2 with it. The softmax loss has no
chunked form: it holds the plain figure (its ring column is what the sigmoid loss would
take)."""

from typing import Any, Callable, Dict, Optional

import jax
import ml_collections

from vit_jax.training import objectives
from vit_jax.training.objectives import contrastive_loss

# The global batches of big_vision's image-text recipes and papers: its softmax COCO recipe
# (4,096), and the sigmoid loss paper's 16k and 32k (its best trade-off; it goes higher).
REFERENCE_BATCHES = (4_096, 16_384, 32_768)
# The largest global batch the search for the largest fitting batch looks at.
LARGEST_SEARCHED = 1 << 20
WAYS = ("chunked", "plain")


def chunked(config: ml_collections.ConfigDict) -> bool:
  """Whether the config's loss is the ring (the chunked sigmoid loss)."""
  return config.contrastive.loss == "sigmoid" and bool(config.contrastive.chunked)


def embedding_dim(module, config: ml_collections.ConfigDict) -> int:
  """The width of a pair's embeddings, from abstract shapes (nothing is computed)."""
  sample = objectives.sample_inputs(objectives.get(config), config, None)

  def embedded(rng):
    params = module.init(rng, *sample)["params"]
    return module.apply({"params": params}, sample[-1], method="embed_texts")
  return int(jax.eval_shape(embedded, jax.random.PRNGKey(0)).shape[-1])


def loss_bytes(batch_devices: int, dim: int, way: str) -> Callable[[int], int]:
  """m pairs per device -> the loss's bytes per device, `way` 'chunked' or 'plain'."""
  return lambda m: contrastive_loss.loss_memory_bytes(m * batch_devices, batch_devices, dim,
                                                       way == "chunked")


def per_pair_bytes(fixed: int, peak: Optional[int], per_device: int,
                   loss: Callable[[int], int]) -> Optional[float]:
  """The towers' bytes per pair per device, from the compiled step's peak (None: unknown)."""
  if not peak:
    return None
  return max(peak - fixed - loss(per_device), 0) / per_device


def step_bytes(fixed: int, per_pair: Optional[float], loss: Callable[[int], int],
               m: int) -> Optional[int]:
  return None if per_pair is None else int(fixed + per_pair * m + loss(m))


def largest_fitting(fixed: int, per_pair: Optional[float], loss: Callable[[int], int],
                    limit: Optional[int]) -> Optional[int]:
  """The most pairs per device whose estimated step fits `limit` (0: not even one; None:
  unknown), up to LARGEST_SEARCHED in all."""
  if per_pair is None or not limit:
    return None
  fits = lambda m: step_bytes(fixed, per_pair, loss, m) <= limit
  low, high = 0, LARGEST_SEARCHED
  while low < high:  # the bytes grow with m: the last m that fits
    middle = (low + high + 1) // 2
    low, high = (middle, high) if fits(middle) else (low, middle - 1)
  return low


def report(config: ml_collections.ConfigDict, dim: int, batch_devices: int, fixed: int,
           peak: Optional[int], limit: Optional[int]) -> Dict[str, Any]:
  """The plan's `contrastive_loss_memory` entry (see the module docstring); `peak`: the
  compiled train step's per device at config.batch (None: not known), `limit`: the usable
  bytes per device."""
  own = "chunked" if chunked(config) else "plain"
  per_device = config.batch // batch_devices
  losses = {way: loss_bytes(batch_devices, dim, way) for way in WAYS}
  per_pair = per_pair_bytes(fixed, peak, per_device, losses[own])
  rows = []
  for batch in sorted({config.batch, *REFERENCE_BATCHES}):
    m = batch // batch_devices
    if m < 1 or batch % batch_devices:
      continue
    steps = {way: step_bytes(fixed, per_pair, losses[way], m) for way in WAYS}
    rows.append({"batch": batch, "per_device": m,
                 **{f"{way}_loss_bytes": losses[way](m) for way in WAYS},
                 **{f"{way}_step_bytes": steps[way] for way in WAYS},
                 **{f"{way}_fits": (None if steps[way] is None or not limit
                                    else steps[way] <= limit) for way in WAYS}})
  largest = {way: largest_fitting(fixed, per_pair, losses[way], limit) for way in WAYS}
  return {
      "loss": config.contrastive.loss, "way": own, "embedding_dim": dim,
      "batch_devices": batch_devices, "fixed_bytes": fixed,
      "tower_bytes_per_pair": per_pair, "rows": rows,
      "largest_batch_estimated": {way: None if m is None else m * batch_devices
                                  for way, m in largest.items()},
      "largest_batch": None,  # fit_search.largest_batch's, verified by compiling
  }
