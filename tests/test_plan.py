"""python -m vit_jax.plan: a real process compiling the demo for TPU slices."""

import json

import pytest

import fork_server
import helpers
from vit_jax import plan

LIBTPU_CHATTER = ("TPU accelerator", "host bounds", "libtpu", "InitGoogle", "E0000", "WARNING")

pytest.importorskip("libtpu", reason="compiling for TPUs needs libtpu (the test extra)")
pytestmark = pytest.mark.long  # real processes compiling for TPUs: start first (conftest)


def run_plan(folder, *args):
  """`python -m vit_jax.plan ARGS` as a real process (forked from tests/fork_server.py), its
  stdout and stderr apart: what a user's terminal would show, libtpu's own writes included."""
  return fork_server.run(["vit_jax.plan", *args], helpers.subprocess_env(), helpers.REPO,
                         folder, 600)


# A one-block model at 64 px (257 tokens), 4 micro-batches of 32 images per device on a
# v5e-4: its train step needs 75 MiB, 2.7 times the 27.6 MiB usable under
# --hbm_limit_gib=0.027, its eval step (16 images per device) 29.7 MiB.
OVER_BUDGET = helpers.demo_args(batch=512, batch_eval=64, accum_steps=4, **{
    "model.num_layers": 1, "model.hidden_size": 32, "model.mlp_dim": 64,
    "model.num_heads": 2, "pp.crop": 64, "pp.resize": 64}) + ["--tpu=v5e-4",
                                                              "--hbm_limit_gib=0.027"]


def test_a_step_over_budget_gets_the_accumulation_it_needs_and_then_fits(tmp_path):
  """Exit 3 with the accumulation (and eval batch) the steps' bytes call for, verified by
  compiling; the same command with those flags added plans steps that fit (exit 0), at
  the same global batch. --json=-: the JSON on stdout, the report for people on stderr."""
  done = run_plan(tmp_path, *OVER_BUDGET, "--json=-")
  assert done.returncode == plan.DOES_NOT_FIT_EXIT_CODE, done.stderr
  errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
  assert len(errors) == 1 and "the train step does not fit v5e-4" in errors[0]
  assert "fits with (same global batch, verified by compiling): --config." in errors[0]
  assert not any(word in done.stderr + done.stdout for word in LIBTPU_CHATTER), done.stderr
  report = json.loads(done.stdout)
  assert "memory per device (usable: 27.6M):" in done.stderr
  assert not (helpers.REPO / "-").exists()  # its working directory: no file named '-'

  assert report["slice"] == "v5e-4" and report["devices"] == 4 and not report["fits"]
  assert report["device_kind"] == "TPU v5 lite" and report["peak_tflops_per_device"] == 197.0
  limit = report["hbm_bytes_per_device"]
  assert limit == int(0.027 * 2**30)  # --hbm_limit_gib
  assert report["train"]["peak_bytes_per_device"] > 2.5 * limit
  assert not report["eval"]["fits"]  # 16 images per device: 29.7 MiB, sized too
  assert report["train"]["gflop_per_image"] > 0 and report["eval"]["gflop_per_image"] > 0
  assert report["notes"]
  (suggestion,) = report["suggestions"]
  flags = suggestion["flags"]
  assert any(flag.startswith("--config.accum_steps=") for flag in flags), flags
  assert not any(flag.startswith("--config.batch=") for flag in flags)
  assert any(flag.startswith("--config.batch_eval=") for flag in flags), flags
  assert max(suggestion["peak_bytes_per_device"].values()) <= limit
  search = report["search"]
  assert search["tried"][-1]["result"] == "fits" and not search["out_of_budget"]
  assert search["failed"] == [] and report["plan_seconds"] > 0
  # The time rule: the plan is the compiles it reports and little else.
  compiles = sum(report[step]["compile_seconds"] for step in ("train", "eval")) + sum(
      t["seconds"] for t in search["tried"]) + report["pricing_seconds"]
  assert compiles < report["plan_seconds"] <= 1.2 * compiles
  # Each compile is a line as it starts and one with its time as it ends.
  assert "compiling the train step (batch 512" in done.stderr
  assert f"trying {' '.join(search['tried'][0]['flags'])} (train step, " in done.stderr
  assert "planned in " in done.stderr
  # Without a search, the line claims none was tried.
  unsearched = plan.does_not_fit_line({**report, "suggestions": [], "search": None})
  assert "--nosuggest" in unsearched and "tried" not in unsearched

  # The flags applied: in this process (what a terminal shows was checked above), the
  # same compiles without a second process start.
  applied = helpers.run_in_process(plan, *OVER_BUDGET, *flags, "--nosuggest", "--json=-")
  assert applied.returncode == 0, applied.stderr
  fitted = json.loads(applied.stdout)
  assert fitted["fits"] and fitted["batch"] == report["batch"] == 512
  assert max(fitted[step]["peak_bytes_per_device"] for step in ("train", "eval")) <= limit
  assert fitted["accum_steps"] > report["accum_steps"]


def test_the_compute_line_says_why_there_is_no_estimate():
  """A step that does not fit (nothing compiled to price) is not blamed on the compiler's
  negative estimates; those are named where they are the reason."""
  step = {"estimated_step_seconds": None, "gflop_per_image": None}
  tpu = {"chips": 4, "train": dict(step), "eval": dict(step)}
  assert plan.compute_note(tpu) == plan.DOES_NOT_FIT_NOTE
  tpu["eval"]["gflop_per_image"] = 12.0  # priced, at a negative optimal_seconds
  assert "the train step does not fit" in plan.compute_note(tpu)
  tpu["train"]["gflop_per_image"] = 36.0
  assert plan.compute_note(tpu) == plan.NO_TPU_ESTIMATE_NOTE
  assert plan.compute_note({**tpu, "chips": None}) == plan.NO_ESTIMATE_NOTE
  tpu["eval"]["estimated_step_seconds"] = 0.1
  assert plan.compute_note(tpu) == plan.ESTIMATE_NOTE


@pytest.mark.parametrize("args,says", [
    (["--tpu=v9-8"], "v3-8"), (["--tpu=v3-8", "--config.batch=12"], "divisible"),
    (["--tpu=v3:3x3"], "--tpu=v3:3x3: libtpu has no such slice"),  # libtpu's refusal
    (["--tpu="], "--tpu= is not a TPU slice"),  # not this machine's CPU
    (["--tpu=v3-8", "--json={tmp}"], "is a folder"),
    (["--tpu=v3-8", "--json={tmp}/a_file/plan.json"], "a_file is a file"),
    (["--tpu=v3-8", "--json=/proc/plan.json"], "cannot create files in /proc"),
    (["--config.model_name=SigLIP2-B_16-224"], "--config=configs/siglip2_b16.py "
     "--config.pretrained=SigLIP2-B_16-224"),  # a pair's name is no image model's
    (["--tpu=v3-8", "--gpu=h100"], "--tpu and --gpu name two targets"),
    (["--gpu=rtx9090"], "--gpu=rtx9090 is not a GPU this plan knows: use one of a100-40gb"),
    (["--config.pretrained={tmp}/gone/x.npz"], "gone/x.npz is not found (check the path"),
    (["--config.model_name=SigLIP2-B_16"], "--config=configs/siglip2_b16.py "
     "--config.pretrained=SigLIP2-B_16-224"),  # not 'did you mean ViT-B_16'
    (["--tpu=v3-8", "--json={tmp}/a_file"], "a_file already exists and vit_jax.plan did not "
     "write it: name a new file, or pass --overwrite to replace it"),  # no-clobber
])
def test_usage_mistakes_exit_2_in_one_line_before_compiling(tmp_path, args, says):
  """Each refused in a second, before any compile: nothing is written."""
  (tmp_path / "a_file").write_text("")
  args = [arg.format(tmp=tmp_path) for arg in args]
  done = helpers.run_in_process(plan, *helpers.demo_args(), *args)
  assert done.returncode == 2, done.stderr
  (line,) = [line for line in done.stderr.splitlines() if line.startswith("error:")]
  assert says in line and "compiling" not in done.stderr, done.stderr
  assert sorted(p.name for p in tmp_path.iterdir()) == ["a_file"]


def test_a_checkpoint_timed_part_by_part_is_refused_saying_how_to_time_it(tmp_path):
  """A checkpoint whose family plan refuses (the main job trains none of its models) and
  the benchmark times part by part: the family's refusal, then the benchmark's command."""
  import functions_family  # pylint: disable=import-outside-toplevel (tests/export)
  path = str(tmp_path / f"model{functions_family.SUFFIX}")
  functions_family.write_checkpoint(path)
  functions_family.register()
  try:
    done = helpers.run_in_process(plan, *helpers.demo_args(), f"--config.model_name={path}")
  finally:
    functions_family.unregister()
  assert done.returncode == 2 and done.stderr.strip().splitlines()[-1] == (
      f"error: config.model_name={path} is a pair-of-functions model: the main job trains "
      f"none; time its two functions with python -m vit_jax.benchmark --model={path} "
      "(--help shows the usage)")


def test_a_pair_is_planned_per_pair_with_its_loss_memory_chunked_and_not():
  """An image-text pair on a v3-8 (8 devices): GFLOP/pair and pairs/s over both towers, its
  loss's memory with and without the ring at the config's batch and big_vision's, the
  largest batch estimated (--nosuggest: none verified)."""
  done = helpers.run_in_process(plan, *helpers.pair_args(), "--tpu=v3-8", "--nosuggest",
                                "--json=-")
  assert done.returncode == 0, done.stderr
  report = json.loads(done.stdout)
  assert report["example"] == "pair" and report["fits"]
  assert report["text_tower"] == {"tower": "transformer", "width": 32, "depth": 1, "length": 8}
  assert report["train"]["model_gflop_per_image"] > 0 and report["train"]["estimated_mfu"]
  memory = report["contrastive_loss_memory"]
  assert (memory["loss"], memory["way"], memory["batch_devices"], memory["embedding_dim"]) == (
      "sigmoid", "chunked", 8, 32)
  rows = {row["batch"]: row for row in memory["rows"]}
  assert sorted(rows) == [64, 4096, 16_384, 32_768] and rows[32_768]["per_device"] == 4096
  assert rows[32_768]["chunked_loss_bytes"] < rows[32_768]["plain_loss_bytes"]
  assert rows[64]["chunked_step_bytes"] == pytest.approx(
      report["train"]["peak_bytes_per_device"], rel=1e-6)
  assert memory["largest_batch_estimated"]["chunked"] > memory["largest_batch_estimated"][
      "plain"] > 64
  assert memory["largest_batch"] is None
  text = done.stderr
  assert "GFLOP/pair" in text and "pairs/s" in text and "text tower (1 blocks of 32" in text
  assert "contrastive loss per device (32-wide embeddings; chunked: the ring passes " in text
  assert "largest batch that fits: not verified by compiling (--nosuggest); estimated " in text


def test_a_pair_over_its_memory_is_sized_by_its_global_batch(tmp_path):
  """A contrastive loss pairs the whole batch and takes no accumulation: the search sizes
  the batch itself, verified by compiling, and that is the largest batch that fits."""
  done = helpers.run_in_process(plan, *helpers.pair_args(batch=512), "--hbm_limit_gib=0.03",
                                "--json=-")
  assert done.returncode == plan.DOES_NOT_FIT_EXIT_CODE, done.stderr
  report = json.loads(done.stdout)
  (suggestion,) = report["suggestions"]
  (flag,) = suggestion["flags"]
  batch = int(flag.removeprefix("--config.batch="))
  assert 64 <= batch < 512 and not any(t["flags"][0].startswith("--config.accum_steps")
                                       for t in report["search"]["tried"])
  largest = report["contrastive_loss_memory"]["largest_batch"]
  assert largest["batch"] == batch and largest["smallest_not_fitting"] > batch
  assert largest["peak_bytes_per_device"] <= report["hbm_bytes_per_device"]
  (line,) = [line for line in done.stderr.splitlines() if line.startswith("error:")]
  assert f"fits with (a smaller global batch: this objective does not accumulate gradients, " \
      f"verified by compiling): --config.batch={batch}" in line
  assert f"largest batch that fits: {batch:,} verified by compiling" in done.stderr


def test_the_gpu_flag_names_every_gpu_a_plan_knows():
  from absl import flags  # pylint: disable=import-outside-toplevel
  from vit_jax.planning import compiler_readings  # pylint: disable=import-outside-toplevel
  flag_values = flags.FlagValues()
  plan.define_flags(flag_values)
  assert all(name in flag_values["gpu"].help and name in plan.__doc__
             for name in compiler_readings.GPUS)
