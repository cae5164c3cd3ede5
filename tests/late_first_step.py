"""`python -m late_first_step SECONDS MODULE ARGS`: MODULE run as `python -m` runs it, its
main job's steps starting SECONDS late, as on a process that compiles its first step long
after its peers do (tests/test_multiprocess.py)."""

import runpy
import sys
import time

from vit_jax.training import loop


def main():
  seconds, module, *args = sys.argv[1:]
  run = loop._run  # pylint: disable=protected-access

  def late(job):
    time.sleep(float(seconds))
    return run(job)

  loop._run = late  # pylint: disable=protected-access
  sys.argv = [module, *args]
  runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
  main()
