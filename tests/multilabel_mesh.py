"""Run by test_train_multilabel.py as real processes (tests/fork_server.py): evaluates a
run's params.npz on a multi-label folder over every device of one or several processes
and writes the metrics and per-class results process 0 saw, as JSON.

  python -m multilabel_mesh DATASET PARAMS OUT [COORDINATOR PROCESS_ID NUM_PROCESSES]
"""

import json
import sys

import jax

from helpers import demo_config
from vit_jax import load_npz
from vit_jax.data.tf_stack import tf_pipeline
from vit_jax.training import sharding
from vit_jax.training.evaluators import classification


def main(argv):
  dataset, params_path, out, *distributed = argv[1:]
  if distributed:
    address, process_id, num_processes = distributed
    jax.distributed.initialize(address, int(num_processes), int(process_id))
  config = demo_config(dataset=dataset, batch_eval=32)
  module, params = load_npz(params_path)
  mesh = sharding.make_mesh({"data": -1})
  evaluator = classification.Evaluator(config, module, mesh, tf_pipeline.open_dataset(config))
  replicated = jax.tree.map(lambda _: sharding.replicated(mesh), params)
  metrics = evaluator(sharding.put(params, replicated), step=0)
  if jax.process_index() == 0:
    with open(out, "w") as f:
      json.dump({"devices": jax.device_count(), "metrics": metrics,
                 "test": evaluator.reports["eval/test"].to_json()}, f)


if __name__ == "__main__":
  main(sys.argv)
