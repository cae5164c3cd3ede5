"""vit_jax.planning.fit_search: the arithmetic that sizes the micro-batch, what it changes in which
order, and what a spent budget or a refused compile says (no step compiled here: the
command's test, tests/test_plan.py, compiles a search and applies what it suggests)."""

import jax
import jax.numpy as jnp
import pytest

import helpers
from vit_jax import plan
from vit_jax.planning import compiler_readings, fit_search
from vit_jax.training.objectives import contrastive_loss

pytest.importorskip("libtpu", reason="compiling for TPUs needs libtpu (the test extra)")

MIB = 2**20


def test_levers_keep_the_batch_and_go_from_fast_to_frugal():
  """Accumulation alone, then stronger remat, then fsdp with the strongest, then bfloat16:
  none changes config.batch (the recipe)."""
  config = helpers.demo_config(batch=256)
  assert fit_search.levers(config, "train", 8) == [
      {}, {"model.remat_policy": "dots"}, {"model.remat_policy": "full"},
      {"model.remat_policy": "full", **fit_search.FSDP},
      {"model.remat_policy": "full", **fit_search.FSDP, "dtype": "bfloat16"}]
  # An eval step has no backward pass to rematerialise; one device has nothing to shard.
  assert fit_search.levers(config, "eval", 1) == [{}, {"dtype": "bfloat16"}]
  bf16 = helpers.demo_config(dtype="bfloat16")
  with bf16.unlocked():
    bf16.model.remat_policy = "dots"
  assert fit_search.levers(bf16, "train", 1) == [{}, {"model.remat_policy": "full"}]


def test_the_line_is_drawn_from_the_steps_own_bytes():
  """One point: through it and the fixed bytes (all the rest scales with the images).
  A pass that fits and one that does not: their secant."""
  fixed = 8 * MIB
  intercept, slope = fit_search.line(fixed, None, (128, 136 * MIB), (0, 0))
  assert (intercept, slope) == (fixed, MIB)
  # 40 MiB usable: 32 images per device fit on that line, so accum_steps = 128 / 32.
  assert fit_search.largest_fitting([1, 2, 4, 8, 16, 32, 64], intercept, slope,
                                    40 * MIB) == 32
  intercept, slope = fit_search.line(fixed, (8, 30 * MIB), (16, 46 * MIB), (0, 0))
  assert slope == 2 * MIB and intercept == 14 * MIB
  assert fit_search.line(fixed, None, None, (1.0, 2.0)) == (1.0, 2.0)  # nothing compiled


def test_only_the_changed_keys_become_flags():
  config = helpers.demo_config(batch=256, accum_steps=2)
  changes = {"accum_steps": 2, "model.remat_policy": "full", "mesh.tensor": 1}
  assert fit_search.as_flags(fit_search.changed_only(config, changes)) == [
      "--config.model.remat_policy=full"]


def report_for(config, need, hbm, compile_seconds=30.0):
  failing = {"fits": False, "peak_bytes_per_device": need, "shortfall_bytes": need - hbm,
             "compile_seconds": compile_seconds}
  return {"num_classes": 10, "fsdp_saving_bytes": 0, "fits": False, "slice": "v5e-4",
          "hbm_bytes_per_device": hbm, "train": failing,
          "eval": {"fits": True, "peak_bytes_per_device": MIB, "compile_seconds": 1.0}}


def test_accumulation_that_cannot_fit_is_ruled_out_without_a_compile():
  """At 20x the usable memory, even one image per device is over on the step's own line:
  the search goes straight to remat; a budget below one compile then stops it, and the
  line names what it ruled out and what it did not try."""
  config = helpers.demo_config(batch=256, batch_eval=64)
  target = compiler_readings.tpu_target("v5e-4", hbm_limit_bytes=3 * MIB)  # the state: 2.3 MiB
  report = report_for(config, 60 * MIB, target.hbm_bytes_per_device)
  search = fit_search.search(config, target, report, budget_s=20)  # < one compile (30 s)
  assert search.out_of_budget and search.tried == [] and search.found == []
  assert search.checked[0].startswith("accumulation alone: 1 image(s) per device needs")
  assert search.not_tried[0] == ["--config.model.remat_policy=dots"]
  report.update(suggestions=[], search=search.as_json())
  line = plan.does_not_fit_line(report)
  assert "ran out of its 20 s budget after 0 compile(s), none of which fits" in line
  assert "not tried: --config.model.remat_policy=dots | " in line and "--suggest_budget" in line


def test_nothing_fits_names_what_was_checked_and_only_then_the_batch():
  search = {"out_of_budget": False, "found": [], "tried": [], "failed": [], "not_tried": [],
            "budget_s": 900, "checked": ["accumulation alone: 1 image(s) per device needs "
                                         "about 9.1 GiB"]}
  report = {"slice": "v2-8", "hbm_bytes_per_device": 7 * 2**30, "suggestions": [],
            "search": search, "eval": {"fits": True},
            "train": {"fits": False, "peak_bytes_per_device": 50 * 2**30}}
  line = plan.does_not_fit_line(report)
  assert ("no change keeping the global batch fits (checked: accumulation alone: 1 image(s)"
          " per device needs about 9.1 GiB): lower config.batch or use a larger slice") in line
  search["failed"] = [{"flags": ["--config.dtype=bfloat16"], "step": "train",
                       "error": "INVALID_ARGUMENT: ..."}]
  assert line + ("; failed to compile for another reason than memory: "
                 "--config.dtype=bfloat16: INVALID_ARGUMENT: ...") == plan.does_not_fit_line(
                     report)


def test_a_compile_refused_for_another_reason_is_not_called_out_of_memory():
  """A program the TPU compiler refuses (a custom call it has no kernel for) is
  CompileFailed, not DoesNotFit; libtpu's two out-of-memory wordings are DoesNotFit."""
  target = compiler_readings.tpu_target("v5e-4")
  fn = jax.jit(lambda x: jax.ffi.ffi_call("vit_jax_no_such_kernel",
                                          jax.ShapeDtypeStruct((8,), jnp.float32))(x))
  args = (jax.ShapeDtypeStruct((8,), jnp.float32,
                               sharding=jax.sharding.SingleDeviceSharding(target.devices[0])),)
  with pytest.raises(compiler_readings.CompileFailed, match="not for memory.*no_such_kernel"):
    compiler_readings.compile_for(fn, args, target)
  assert compiler_readings.out_of_hbm(
      "RESOURCE_EXHAUSTED: Ran out of memory on HBM, the total memory required for HLO "
      "temporaries (17.30G) exceeds available HBM")
  assert compiler_readings.out_of_hbm(
      "RESOURCE_EXHAUSTED: XLA:TPU compile permanent error. Ran out of memory in memory space "
      "hbm. Used 9.8G of 7.5G hbm.")
  assert not compiler_readings.out_of_hbm(
      "RESOURCE_EXHAUSTED: Ran out of memory in memory space vmem")


def test_an_objective_without_accumulation_is_sized_by_its_global_batch():
  """A contrastive loss pairs the whole batch (its check refuses accum_steps): the train
  step's lever is the batch, per device any count up to the cap (multiples of 8 from 8);
  the line leaves the loss's own bytes (quadratic) to the loss's formula."""
  pair, target = helpers.pair_config(batch=512), compiler_readings.local_target()
  assert not fit_search.accumulates(pair) and fit_search.accumulates(helpers.demo_config())
  memory = {"batch_devices": 1, "embedding_dim": 32, "way": "chunked"}
  report = {"num_classes": 10, "contrastive_loss_memory": memory,
            "train": {"compile_seconds": 1.0}, "eval": {"compile_seconds": 1.0}}
  ctx = fit_search._context(pair, target, report, fit_search.Search(budget_s=1), cap=1024)
  assert not ctx.accumulates and ctx.sized("train", 96) == {"batch": 96}
  assert ctx.sized("eval", 16) == {"batch_eval": 16}
  sizes = ctx.sizes("train")
  assert sizes[:9] == [1, 2, 3, 4, 5, 6, 7, 8, 16] and sizes[-1] == 1024
  assert ctx.off_line("train")(512) == contrastive_loss.loss_memory_bytes(512, 1, 32, True)
  assert ctx.off_line("eval")(512) == 0
  assert ctx.on_line("train", (512, 10 * MIB)) == (512, 10 * MIB - ctx.extra(512))
  # On a line of 1 byte per pair plus m^2 off it, 30 bytes hold 5 pairs (5 + 25).
  assert fit_search.largest_fitting(list(range(1, 11)), 0, 1, 30, lambda m: m * m) == 5
