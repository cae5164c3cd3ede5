"""python -m vit_jax.plan: a real process compiling the demo for TPU slices."""

import json

import pytest

import fork_server
import helpers
from vit_jax import plan

LIBTPU_CHATTER = ("TPU accelerator", "host bounds", "libtpu", "InitGoogle", "E0000", "WARNING")

pytest.importorskip("libtpu", reason="compiling for TPUs needs libtpu (the test extra)")


def run_plan(folder, *args):
  """`python -m vit_jax.plan ARGS` as a real process (forked from tests/fork_server.py), its
  stdout and stderr apart: what a user's terminal would show, libtpu's own writes included."""
  return fork_server.run(["vit_jax.plan", *args], helpers.subprocess_env(), helpers.REPO,
                         folder, 600)


def test_a_step_that_does_not_fit_exits_3_with_a_change_that_fits(tmp_path):
  """The demo at batch 256 under a 30.7 MiB limit (it needs 40.8 MiB): the train step does
  not fit; the change suggested was compiled under the same limit and fits it. --json=-:
  the JSON on stdout, the report for people on stderr."""
  args = [*helpers.demo_args(batch=256, batch_eval=64), "--tpu=v5e-4", "--hbm_limit_gib=0.03",
          "--max_suggestions=1", "--json=-"]
  done = run_plan(tmp_path, *args)
  assert done.returncode == plan.DOES_NOT_FIT_EXIT_CODE, done.stderr
  errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
  assert len(errors) == 1 and "the train step does not fit v5e-4" in errors[0]
  assert "fits with: --config." in errors[0]
  assert not any(word in done.stderr + done.stdout for word in LIBTPU_CHATTER), done.stderr
  report = json.loads(done.stdout)
  assert "memory per device (usable: 30.7M):" in done.stderr
  assert not (helpers.REPO / "-").exists()  # its working directory: no file named '-'

  assert report["slice"] == "v5e-4" and report["devices"] == 4 and not report["fits"]
  assert report["device_kind"] == "TPU v5 lite" and report["peak_tflops_per_device"] == 197.0
  assert report["hbm_bytes_per_device"] == int(0.03 * 2**30)  # --hbm_limit_gib
  assert not report["train"]["fits"] and report["eval"]["fits"]
  assert report["train"]["peak_bytes_per_device"] > report["hbm_bytes_per_device"]
  assert report["eval"]["peak_bytes_per_device"] <= report["hbm_bytes_per_device"]
  for key in ("train", "eval"):
    assert report[key]["gflop_per_image"] > 0 and report[key]["estimated_img_per_sec"] > 0
  assert report["estimated_core_days"] > 0 and report["notes"]
  (suggestion,) = report["suggestions"]
  assert suggestion["peak_bytes_per_device"]["train"] <= report["hbm_bytes_per_device"]
  assert report["search"]["tried"][-1] == suggestion["flags"]
  assert not report["search"]["out_of_budget"] and report["plan_seconds"] > 0
  # Each compile is a line as it starts and one with its time as it ends.
  assert "compiling the train step (batch 256" in done.stderr
  assert f"trying {' '.join(suggestion['flags'])} (" in done.stderr
  assert "planned in " in done.stderr
  # Without a search, the line claims none was tried.
  unsearched = plan.does_not_fit_line({**report, "suggestions": [], "search": None})
  assert "--nosuggest" in unsearched and "tried" not in unsearched


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
