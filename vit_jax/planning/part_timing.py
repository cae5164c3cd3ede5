"""Inference throughput of a two-tower model's image and text towers (python -m
vit_jax.benchmark --model=TWO_TOWER): each tower's forward pass (embeddings, normalised)
compiled and timed on one device, with the same numbers as the ViT benchmark's rows:
compile time, step times, items/s, XLA's FLOPs per item, MFU against a measured peak and
the compiled step's memory. The main job trains no two-tower model, so there is no train
mode; the weights are the file's (the timing does not depend on their values).
"""

import os
import statistics
import time
from typing import Callable, Dict, List, Optional, Tuple

import jax
import jax.numpy as jnp
import numpy as np

from vit_jax.base import errors
from vit_jax.families.two_tower import npz_file as two_tower_load
from vit_jax.families.two_tower import names as two_tower_names
from vit_jax.families.two_tower import opening as two_tower_open
from vit_jax.planning import throughput


def load(checkpoint: str):
  """(model, params, info) of a two-tower .npz or folder, or of a released name already
  downloaded; a name not downloaded is refused in one line (its geometry is in its file)."""
  if checkpoint in two_tower_names.NAMES and not os.path.exists(checkpoint):
    local = two_tower_names.local_path(checkpoint)
    if not os.path.exists(local):
      raise errors.InvalidInput(
          f"{checkpoint} is not downloaded and its towers' sizes are read from its file: "
          f"python -m vit_jax.download {checkpoint} first, or pass its .npz / folder")
    checkpoint = local
  return two_tower_load.load_two_tower(checkpoint)


def _measure(fn: Callable, params, inputs, steps: int):
  """(compile seconds, step times, XLA FLOPs of one call, device bytes) of jit(fn)."""
  start = time.perf_counter()
  compiled = jax.jit(fn).lower(params, inputs).compile()
  compile_s = time.perf_counter() - start
  times = []
  for _ in range(steps):
    start = time.perf_counter()
    jax.block_until_ready(compiled(params, inputs))
    times.append(time.perf_counter() - start)
  cost = compiled.cost_analysis() or {}
  cost = cost[0] if isinstance(cost, list) else cost
  memory = compiled.memory_analysis()
  device_bytes = (memory.argument_size_in_bytes + memory.output_size_in_bytes +
                  memory.temp_size_in_bytes - memory.alias_size_in_bytes)
  return compile_s, times, float(cost.get("flops", 0.0)) or None, device_bytes


def runs(model, params, info, *, batch: int, image_size: Optional[int] = None,
         dtype: str = "float32", steps: int = 10,
         peak_flops: Optional[float] = None) -> List[Tuple[Dict, Callable[[], Dict]]]:
  """Per tower, (its row's key, a function measuring it): the result has the keys of
  throughput.measure's (model 'image tower' / 'text tower', image_size the image side or
  the token count, img_per_sec items per second)."""
  compute = jnp.dtype(dtype)
  model = model.clone(img=model.img.clone(dtype=compute), txt=model.txt.clone(dtype=compute))
  side = two_tower_open.image_size(info, image_size)
  rng = np.random.default_rng(0)
  cases = (("image tower", side, model.embed_images,
            rng.uniform(-1, 1, (batch, side, side, 3)).astype(np.float32)),
           ("text tower", info.text_length, model.embed_texts,
            rng.integers(0, model.txt.vocab_size, (batch, info.text_length)).astype(np.int32)))
  device = jax.local_devices()[0]

  def measure(key, method, inputs):
    fn = lambda p, x: model.apply({"params": p}, x, method=method)
    compile_s, times, flops, device_bytes = _measure(
        fn, jax.device_put(params, device), jax.device_put(inputs, device), steps)
    peak = peak_flops or throughput.measure_peak_flops(compute)
    step_s = statistics.median(times) if times else None
    per_sec = batch / step_s if step_s else None
    per_item = flops / batch if flops else None
    return {**key, "family": info.family, "devices": 1, "platform": device.platform,
            "compile_s": compile_s, "step_s_median": step_s,
            "step_s_min": min(times, default=None), "step_s_max": max(times, default=None),
            "img_per_sec": per_sec, "img_per_sec_per_device": per_sec,
            "gflop_per_image": per_item / 1e9 if per_item else None,
            "xla_gflop_per_image": per_item / 1e9 if per_item else None,
            "peak_tflops_per_device": peak / 1e12,
            "mfu": per_item * per_sec / peak if per_item and per_sec else None,
            "mib_per_device": device_bytes / 2**20}

  return [(key, lambda key=key, method=method, inputs=inputs: measure(key, method, inputs))
          for key, method, inputs in (
              (dict(model=name, mode="infer", batch=batch, image_size=size, dtype=dtype),
               method, inputs) for name, size, method, inputs in cases)]
