"""Entry point: python -m vit_jax.main --config=configs/vit_b16.py[:dataset] --workdir=DIR.

Any config value can be overridden on the command line (--config.batch=64). Rerunning
the same command resumes from the last checkpoint in the workdir.
"""

import os
import shlex

from absl import flags
from ml_collections import config_flags

from vit_jax.base import cli, console, file_urls

FLAGS = flags.FLAGS


def define_flags(flag_values: flags.FlagValues = FLAGS) -> None:
  """The command's flags; not defined on import, so importers' flags stay their own."""
  define = dict(flag_values=flag_values)
  config_flags.DEFINE_config_file("config", None, "Experiment config file (configs/*.py[:arg]).",
                                  lock_config=True, **define)
  flags.DEFINE_string("workdir", None, "Where checkpoints, metrics and params.npz go.", **define)
  flags.DEFINE_string("coordinator_address", None,
                      "HOST:PORT of process 0, to train with several processes (hosts).", **define)
  flags.DEFINE_integer("num_processes", None, "Number of processes, with --coordinator_address.",
                       **define)
  flags.DEFINE_integer("process_id", None, "This process's index, with --coordinator_address.",
                       **define)
  flags.DEFINE_integer("heartbeat_timeout", 60,
                       "Seconds after which the other processes give up on a dead peer.", **define)
  flags.mark_flags_as_required(["config", "workdir"], flag_values=flag_values)


def cluster_detected() -> bool:
  """A multi-process launch that jax.distributed.initialize() can configure by itself."""
  env = os.environ
  return (int(env.get("SLURM_NTASKS", "1")) > 1 or "," in env.get("TPU_WORKER_HOSTNAMES", "")
          or "MEGASCALE_COORDINATOR_ADDRESS" in env)


def initialize_distributed(flag_values: flags.FlagValues = FLAGS) -> None:
  """Joins the processes of a multi-host run (explicit flags, or a detected TPU pod/SLURM)."""
  import jax
  timeouts = dict(initialization_timeout=300,
                  heartbeat_timeout_seconds=flag_values.heartbeat_timeout)
  if flag_values.coordinator_address:
    if flag_values.num_processes is None or flag_values.process_id is None:
      raise cli.UsageError("--coordinator_address needs --num_processes and --process_id")
    jax.distributed.initialize(flag_values.coordinator_address,
                               num_processes=flag_values.num_processes,
                               process_id=flag_values.process_id, **timeouts)
  elif cluster_detected():
    jax.distributed.initialize(**timeouts)
  else:
    return
  if jax.default_backend() == "cpu":
    _open_cpu_collectives()
  console.log.info("process %d of %d, %d local / %d global devices", jax.process_index(),
                   jax.process_count(), jax.local_device_count(), jax.device_count())


def _open_cpu_collectives() -> None:
  """Opens the CPU collectives' Gloo connections now, while the processes are in step
  (initialize returns on all of them together). One opened at a collective's first call
  gives up after a fixed 30 s (jax 0.10.x: "Gloo context initialization failed:
  DEADLINE_EXCEEDED: GetKeyValue() timed out"), which ended a run whose processes reached
  the workdir check or compiled their first step over 30 s apart; once open, a collective
  waits for a late process. Opened: all devices together (the train and eval steps'
  all-reduce) and each local device with its peers (broadcast_one_to_all,
  process_allgather)."""
  import jax
  import numpy as np
  from jax.experimental import multihost_utils
  from jax.sharding import Mesh, NamedSharding, PartitionSpec
  multihost_utils.broadcast_one_to_all(np.int32(0))
  mesh = Mesh(np.array(jax.devices()), ("all",))
  ones = multihost_utils.host_local_array_to_global_array(
      np.ones(jax.local_device_count(), np.int32), mesh, PartitionSpec("all"))
  total = jax.jit(jax.numpy.sum, out_shardings=NamedSharding(mesh, PartitionSpec()))(ones)
  total.block_until_ready()


@cli.command
def main(argv, flag_values: flags.FlagValues = FLAGS):
  """The main job; flag_values: the parsed flags (a test can run the command in its own
  process on a FlagValues of its own)."""
  cli.no_arguments(argv)
  config = cli.load_config(flag_values)
  cli.check_dataset_override(flag_values)
  workdir = file_urls.as_local(flag_values.workdir)
  if config.get("loader", "tf") == "tf":  # the Grain loader never imports TensorFlow
    cli.keep_tensorflow_off_accelerators()
  initialize_distributed(flag_values)
  from vit_jax.training import loop, state_and_step
  try:
    loop.train_and_evaluate(config, workdir)
  except state_and_step.DoesNotFit as e:
    raise state_and_step.DoesNotFit(e.what, plan_command(flag_values)) from e


def plan_command(flag_values: flags.FlagValues = FLAGS) -> str:
  """This run's --config and --config.KEY flags as the plan's command line (the plan takes
  exactly vit_jax.main's)."""
  overrides = config_flags.get_override_values(flag_values["config"])
  text = lambda v: f"({','.join(map(str, v))})" if isinstance(v, (tuple, list)) else str(v)
  return shlex.join(["python", "-m", "vit_jax.plan",
                     f"--config={flag_values['config'].config_filename}",
                     *(f"--config.{key}={text(value)}" for key, value in overrides.items())])


if __name__ == "__main__":
  define_flags()
  cli.run(main)
