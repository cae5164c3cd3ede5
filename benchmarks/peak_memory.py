"""Runs a `python -m` command and prints the first local device's measured peak memory
when it exits, to set beside what `python -m vit_jax.plan` predicted:

  python benchmarks/peak_memory.py vit_jax.main --config=configs/vit_b16.py:/tmp/jpegs ...

Devices that keep no allocator statistics (the CPU) print that they have none.
"""

import atexit
import runpy
import sys


def print_peak() -> None:
  import jax  # pylint: disable=import-outside-toplevel
  stats = jax.local_devices()[0].memory_stats() or {}
  peak = stats.get("peak_bytes_in_use")
  print(f"measured peak on {jax.local_devices()[0].device_kind}: "
        + (f"{peak / 2**30:.2f} GiB of {stats.get('bytes_limit', 0) / 2**30:.1f}" if peak
           else "the device keeps no memory statistics"), flush=True)


if __name__ == "__main__":
  atexit.register(print_peak)
  module = sys.argv[1]
  sys.argv = [module, *sys.argv[2:]]
  runpy.run_module(module, run_name="__main__", alter_sys=True)
