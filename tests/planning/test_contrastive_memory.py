"""vit_jax.planning.contrastive_memory: a contrastive config's loss memory in its plan, with
and without chunking, at the config's and big_vision's batches, and the largest batch its
step's bytes allow (arithmetic only: tests/test_plan.py compiles a plan of a pair)."""

import helpers
from vit_jax.planning import contrastive_memory
from vit_jax.training import objectives
from vit_jax.training.objectives import contrastive_loss

GIB = 2**30


def test_the_embedding_width_is_read_from_abstract_shapes():
  config = helpers.pair_config()
  module, _ = objectives.get(config).create_model(config, 0,
                                                                     load_pretrained=False)
  assert contrastive_memory.embedding_dim(module, config) == 32
  wider = helpers.pair_config(**{"contrastive.out_dim": (48, 48)})
  module, _ = objectives.get(wider).create_model(wider, 0,
                                                                    load_pretrained=False)
  assert contrastive_memory.embedding_dim(module, wider) == 48


def test_a_sigmoid_pair_at_32k_on_8_devices_holds_less_chunked_than_plain():
  """Each row: the loss's bytes both ways (loss_memory_bytes), the step's estimated peak
  (the compiled step's per-pair bytes, less its loss, plus the loss at that size), and
  whether that fits; the largest batches both ways follow from the same line."""
  config = helpers.pair_config(batch=4096)
  fixed, peak, limit = 2 * GIB, 6 * GIB, 15 * GIB  # 512 pairs per device at 4k
  memory = contrastive_memory.report(config, 768, 8, fixed, peak, limit)
  assert (memory["loss"], memory["way"], memory["batch_devices"]) == ("sigmoid", "chunked", 8)
  assert [row["batch"] for row in memory["rows"]] == [4096, 16_384, 32_768]
  row = memory["rows"][-1]
  assert row["per_device"] == 4096
  assert row["chunked_loss_bytes"] == contrastive_loss.loss_memory_bytes(32_768, 8, 768, True)
  assert row["plain_loss_bytes"] == contrastive_loss.loss_memory_bytes(32_768, 8, 768, False)
  assert row["chunked_loss_bytes"] < row["plain_loss_bytes"] / 5
  per_pair = (peak - fixed - contrastive_loss.loss_memory_bytes(4096, 8, 768, True)) / 512
  assert memory["tower_bytes_per_pair"] == per_pair
  assert row["chunked_step_bytes"] == int(fixed + per_pair * 4096 + row["chunked_loss_bytes"])
  assert row["plain_step_bytes"] > row["chunked_step_bytes"]
  assert memory["rows"][0]["chunked_fits"] and not row["chunked_fits"]
  largest = memory["largest_batch_estimated"]
  assert 4096 < largest["plain"] < largest["chunked"] < 32_768
  assert largest["chunked"] % 8 == 0 and memory["largest_batch"] is None  # not compiled


def test_a_step_that_did_not_compile_has_loss_bytes_but_no_estimate():
  config = helpers.pair_config(batch=512, **{"contrastive.loss": "softmax",
                                             "contrastive.bias_init": None})
  memory = contrastive_memory.report(config, 768, 1, GIB, None, 15 * GIB)
  assert memory["way"] == "plain" and [row["batch"] for row in memory["rows"]] == [
      512, 4096, 16_384, 32_768]
  row = memory["rows"][0]
  assert row["plain_loss_bytes"] == row["chunked_loss_bytes"]  # one device: no ring
  assert row["plain_step_bytes"] is None and row["plain_fits"] is None
  assert memory["largest_batch_estimated"] == {"chunked": None, "plain": None}
