"""Batches sized to the memory they run in: the largest batch of a compiled program that
fits the free memory of its device (a GPU's or TPU's, or the host's for CPU devices), or
one line saying what one item needs. Commands that read images at a size the user picks
(NaFlex's patch budget: attention grows with its square) ask it before they allocate, so
that a budget too large is a refusal, not a host swapped to a halt or a numpy traceback."""

import dataclasses
import os
from typing import Any, Callable, Optional

import jax

from vit_jax.base import errors


class DoesNotFit(errors.InvalidInput):
  """One item of the program needs more memory than is free; need / have in bytes."""

  def __init__(self, message: str, need: int, have: int):
    super().__init__(message)
    self.need, self.have = need, have


def available_bytes(device: Optional[jax.Device] = None) -> int:
  """Free memory for a program on `device` (default: the first local one): its limit less
  what is in use, or for CPU devices the host's available memory (MemAvailable)."""
  device = device or jax.local_devices()[0]
  stats = device.memory_stats() or {}
  if "bytes_limit" in stats:
    return int(stats["bytes_limit"]) - int(stats.get("bytes_in_use", 0))
  try:
    with open("/proc/meminfo", encoding="ascii") as f:
      for line in f:
        if line.startswith("MemAvailable:"):
          return int(line.split()[1]) * 1024
  except OSError:
    pass
  return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")


def program_bytes(compiled: Any, resident: int = 0) -> int:
  """What running a compiled program allocates: its arguments, outputs and temporaries as
  the compiler counts them, less `resident` bytes already in memory (its weights)."""
  analysis = compiled.memory_analysis()
  if analysis is None:  # a backend without the analysis: nothing known beyond the bound
    return 0
  return max(0, analysis.argument_size_in_bytes + analysis.output_size_in_bytes
             + analysis.temp_size_in_bytes - analysis.alias_size_in_bytes - resident)


@dataclasses.dataclass(frozen=True)
class Fitted:
  """A compiled program at the batch that fits."""
  compiled: Any
  batch: int


def largest_batch(compile_at: Callable[[int], Any], batch: int,
                  lower_bound: Callable[[int], int], *, resident: int = 0,
                  have: Optional[int] = None, what: str = "one item") -> Fitted:
  """compile_at(b) for the largest b <= batch whose program fits `have` bytes (default:
  available_bytes()); lower_bound(b): bytes it needs at least, checked first so that a
  hopeless size is refused without compiling. DoesNotFit (`what` named) when one item
  does not fit."""
  have = available_bytes() if have is None else have
  while True:
    need = lower_bound(batch)
    if need <= have:
      compiled = compile_at(batch)
      need = program_bytes(compiled, resident)
      if need <= have:
        return Fitted(compiled, batch)
    if batch == 1:
      raise DoesNotFit(f"{what} needs {need / 2**30:.1f} GiB, more than the "
                       f"{have / 2**30:.1f} GiB free", need, have)
    batch = max(1, min(batch - 1, batch * have // need))
