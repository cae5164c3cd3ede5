"""The benchmark command's library for models timed part by part (python -m vit_jax.benchmark
--model=CHECKPOINT of a family with BenchmarkParts, e.g. an image-text model's towers): each
part's inference compiled and timed on one device, with the numbers of the step rows
(vit_jax.planning.step_timing): compile time, step times, items/s, XLA's FLOPs per item,
MFU against a measured peak and the compiled program's memory."""

from typing import Optional

import jax
import jax.numpy as jnp

from vit_jax.models import family_contract, family_registry
from vit_jax.planning import step_timing


def family_of(checkpoint: str) -> Optional[family_contract.Family]:
  """The family that claims `checkpoint` and times it by parts, or None."""
  family = family_registry.claiming(checkpoint)
  return family if family is not None and family.benchmark_parts is not None else None


def measure(part: family_contract.TimedPart, key: dict, kind: str, steps: int,
            peak_flops: Optional[float]) -> dict:
  """Compiles and times `steps` calls of one part on device 0: its row's numbers, with the
  keys of step_timing.measure's (key: model, mode, batch, image_size, dtype)."""
  device = jax.local_devices()[0]
  args = (jax.device_put(part.params, device), jax.device_put(part.inputs, device))
  compiled, compile_s, times = step_timing.compile_and_time(jax.jit(part.fn), args, steps)
  peak = peak_flops or step_timing.measure_peak_flops(jnp.dtype(key["dtype"]))
  return {**key, "family": kind, "devices": 1, "platform": device.platform,
          **step_timing.numbers(compiled, compile_s, times, key["batch"], 1, None, peak)}
