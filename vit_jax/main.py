"""Entry point: python -m vit_jax.main --config=configs/vit_b16.py[:dataset] --workdir=DIR.

Any config value can be overridden on the command line (--config.batch=64). Rerunning
the same command resumes from the last checkpoint in the workdir.
"""

import errno
import os
import sys

from absl import app, flags, logging
from ml_collections import config_flags

from vit_jax import cli, console
from vit_jax.checkpoints import train_state

FLAGS = flags.FLAGS
config_flags.DEFINE_config_file("config", None, "Experiment config file (configs/*.py[:arg]).",
                                lock_config=True)
flags.DEFINE_string("workdir", None, "Where checkpoints, metrics and params.npz go.")
flags.DEFINE_string("coordinator_address", None,
                    "HOST:PORT of process 0, to train with several processes (hosts).")
flags.DEFINE_integer("num_processes", None, "Number of processes, with --coordinator_address.")
flags.DEFINE_integer("process_id", None, "This process's index, with --coordinator_address.")
flags.DEFINE_integer("heartbeat_timeout", 60,
                     "Seconds after which the other processes give up on a dead peer.")
flags.mark_flags_as_required(["config", "workdir"])

# Mistakes a user can fix: shown as one `error:` line instead of a traceback.
USER_ERRORS = (ValueError, FileNotFoundError, FloatingPointError,
               train_state.CheckpointRestoreError, train_state.DiskFullError)
CONFIG_ERRORS = (flags.Error, AttributeError, KeyError, TypeError, ValueError, OSError)


def exit_with_error(error: BaseException, what: str, code: int = 1):
  """Prints `error: <what><message>` on one line and exits."""
  logging.debug("full traceback", exc_info=True)
  print(f"error: {what}{cli.one_line(error)}", file=sys.stderr)
  sys.exit(code)


def parse_flags(argv):
  try:
    return FLAGS(argv)
  except CONFIG_ERRORS as e:
    exit_with_error(e, "bad flag or config override: ", code=2)


def cluster_detected() -> bool:
  """A multi-process launch that jax.distributed.initialize() can configure by itself."""
  env = os.environ
  return (int(env.get("SLURM_NTASKS", "1")) > 1 or "," in env.get("TPU_WORKER_HOSTNAMES", "")
          or "MEGASCALE_COORDINATOR_ADDRESS" in env)


def initialize_distributed() -> None:
  """Joins the processes of a multi-host run (explicit flags, or a detected TPU pod/SLURM)."""
  import jax
  timeouts = dict(initialization_timeout=300, heartbeat_timeout_seconds=FLAGS.heartbeat_timeout)
  if FLAGS.coordinator_address:
    if FLAGS.num_processes is None or FLAGS.process_id is None:
      raise app.UsageError("--coordinator_address needs --num_processes and --process_id")
    jax.distributed.initialize(FLAGS.coordinator_address, num_processes=FLAGS.num_processes,
                               process_id=FLAGS.process_id, **timeouts)
  elif cluster_detected():
    jax.distributed.initialize(**timeouts)
  else:
    return
  console.log.info("process %d of %d, %d local / %d global devices", jax.process_index(),
                   jax.process_count(), jax.local_device_count(), jax.device_count())


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")
  try:
    config = FLAGS.config
    config.get("dataset")  # a config that failed to load raises only when touched
  except CONFIG_ERRORS as e:
    exit_with_error(e, "cannot load --config: ", code=2)
  import tensorflow as tf  # tf.data only: keep TensorFlow off the accelerators.
  tf.config.set_visible_devices([], "GPU")
  initialize_distributed()
  from vit_jax import train
  try:
    train.train_and_evaluate(config, FLAGS.workdir)
  except USER_ERRORS as e:
    exit_with_error(e, "")
  except OSError as e:
    if e.errno != errno.ENOSPC:
      raise
    where = e.filename or FLAGS.workdir
    exit_with_error(RuntimeError(f"disk full writing {where} ({e.strerror}): free some space "
                                 "and rerun the same command; finished checkpoints are intact"),
                    "")


if __name__ == "__main__":
  cli.run(main, flags_parser=parse_flags)
