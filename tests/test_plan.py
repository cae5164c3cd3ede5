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
  not fit; the change suggested was compiled under the same limit and fits it."""
  report_path = tmp_path / "plan.json"
  args = [*helpers.demo_args(batch=256, batch_eval=64), "--tpu=v5e-4", "--hbm_limit_gib=0.03",
          "--max_suggestions=1", f"--json={report_path}"]
  done = run_plan(tmp_path, *args)
  assert done.returncode == plan.DOES_NOT_FIT_EXIT_CODE, done.stderr
  errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
  assert len(errors) == 1 and "the train step does not fit v5e-4" in errors[0]
  assert "fits with: --config." in errors[0]
  assert not any(word in done.stderr + done.stdout for word in LIBTPU_CHATTER), done.stderr
  report = json.loads(report_path.read_text())
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


def test_usage_mistakes_exit_2():
  for args in (["--tpu=v9-8"], ["--tpu=v3-8", "--config.batch=12"]):
    done = helpers.run_in_process(plan, *helpers.demo_args(), *args)
    assert done.returncode == 2, done.stderr
    (line,) = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert ("v3-8" in line) if "v9" in args[0] else ("divisible" in line), line
