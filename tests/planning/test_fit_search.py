"""vit_jax.planning.fit_search: which changes it tries, in what order, and what a spent budget says."""

import pytest

import helpers
from vit_jax import plan
from vit_jax.planning import compiled_plan, fit_search

pytest.importorskip("libtpu", reason="compiling for TPUs needs libtpu (the test extra)")


def keys(changes):
  return [" ".join(f"{key}={value}" for key, value in c.items()) for c in changes]


def test_accumulation_and_remat_come_first_for_a_train_step():
  config = helpers.demo_config(batch=256, accum_steps=2)
  found = keys(fit_search.candidates(config, 8, ("train",)))
  assert found[:3] == ["accum_steps=4", "model.remat_policy=dots", "mesh.data=1 mesh.fsdp=-1"]
  assert found[3:] == ["accum_steps=8", "model.remat_policy=full", "model.scan_layers=True"]
  # An fsdp mesh that could not cover the shortfall is not tried.
  assert "mesh.data=1 mesh.fsdp=-1" not in keys(
      fit_search.candidates(config, 8, ("train",), fsdp_saving=10, shortfall=11))


def test_an_eval_step_is_given_smaller_eval_batches_not_train_changes():
  """Accumulation and remat leave the eval step as it was: trying them would waste a compile
  each."""
  config = helpers.demo_config(batch_eval=64)
  assert keys(fit_search.candidates(config, 8, ("eval",))) == [
      "batch_eval=32", "batch_eval=16", "mesh.data=1 mesh.fsdp=-1"]
  assert keys(fit_search.candidates(config, 32, ("eval",))) == [  # 16 is not split in 32
      "batch_eval=32", "mesh.data=1 mesh.fsdp=-1"]


def test_a_search_out_of_budget_says_so_and_names_what_it_did_not_try():
  """No verdict from a search that tried nothing: the line names the budget, the changes
  left and how to try them."""
  config = helpers.demo_config(batch=256, batch_eval=64)
  target = compiled_plan.tpu_target("v5e-4")
  report = {"num_classes": 10, "fsdp_saving_bytes": 0, "fits": False, "slice": "v5e-4",
            "hbm_bytes_per_device": target.hbm_bytes_per_device,
            "train": {"fits": False, "shortfall_bytes": 2**20, "peak_bytes_per_device": None,
                      "compile_seconds": 30.0},
            "eval": {"fits": True}}
  search = fit_search.search(config, target, report, budget_s=20)  # < one compile (30 s)
  assert search.out_of_budget and search.tried == [] and search.found == []
  assert search.not_tried[0] == ["--config.accum_steps=2"]
  assert ["--config.accum_steps=2", "--config.model.remat_policy=dots"] in search.not_tried
  line = plan.does_not_fit_line({**report, "suggestions": [], "search": search.as_json()})
  assert "ran out of its 20 s budget after 0 tried" in line and "no single" not in line
  assert "not tried: --config.accum_steps=2 | --config.model.remat_policy=dots" in line
  assert "--suggest_budget" in line


def test_when_both_steps_fail_only_changes_that_touch_both_are_compiled():
  """More accumulation cannot make an eval step fit, nor a smaller batch_eval a train step:
  alone they are not tried, joined they are."""
  config = helpers.demo_config(batch=256, batch_eval=64)
  target = compiled_plan.tpu_target("v5e-4")
  failing = {"fits": False, "shortfall_bytes": 2**20, "peak_bytes_per_device": None,
             "compile_seconds": 30.0}
  report = {"num_classes": 10, "fsdp_saving_bytes": 0, "train": failing, "eval": failing}
  left = fit_search.search(config, target, report, budget_s=0).not_tried
  assert ["--config.accum_steps=2"] not in left and ["--config.batch_eval=32"] not in left
  assert ["--config.model.scan_layers=True"] in left  # changes both steps
  assert ["--config.accum_steps=2", "--config.batch_eval=32"] in left
  assert ["--config.accum_steps=2", "--config.model.remat_policy=dots"] not in left
