"""python -m vit_jax.plan: a real process compiling the demo for TPU slices."""

import json
import subprocess
import sys

import pytest

import helpers
from vit_jax import plan

LIBTPU_CHATTER = ("TPU accelerator", "host bounds", "libtpu", "InitGoogle", "E0000", "WARNING")

pytest.importorskip("libtpu", reason="compiling for TPUs needs libtpu (the test extra)")


def test_a_step_that_does_not_fit_exits_3_with_a_change_that_fits(tmp_path):
  """The demo at batch 256 under a 24 MiB limit: the train step does not fit; the
  suggested change is verified by planning with it (in this process)."""
  report_path = tmp_path / "plan.json"
  args = [*helpers.demo_args(batch=256, batch_eval=64), "--tpu=v5e-4", "--hbm_limit_gib=0.0234",
          "--max_suggestions=1", f"--json={report_path}"]
  done = subprocess.run([sys.executable, "-m", "vit_jax.plan", *args], capture_output=True,
                        text=True, env=helpers.subprocess_env(), timeout=600, check=False)
  assert done.returncode == plan.DOES_NOT_FIT_EXIT_CODE, done.stderr
  errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
  assert len(errors) == 1 and "the train step does not fit v5e-4" in errors[0]
  assert "fits with: --config." in errors[0]
  assert not any(word in done.stderr + done.stdout for word in LIBTPU_CHATTER), done.stderr
  report = json.loads(report_path.read_text())
  assert report["slice"] == "v5e-4" and report["devices"] == 4 and not report["fits"]
  assert not report["train"]["fits"] and report["eval"]["fits"]
  assert report["train"]["peak_bytes_per_device"] > report["hbm_bytes_per_device"]
  assert report["eval"]["peak_bytes_per_device"] <= report["hbm_bytes_per_device"]
  for key in ("train", "eval"):
    assert report[key]["gflop_per_image"] > 0 and report[key]["estimated_img_per_sec"] > 0
  assert report["estimated_core_days"] > 0 and report["notes"]
  (suggestion,) = report["suggestions"]
  assert suggestion["peak_bytes_per_device"]["train"] <= report["hbm_bytes_per_device"]

  fixed = helpers.run_in_process(plan, *[a for a in args if not a.startswith("--json")],
                                 *suggestion["flags"])
  assert fixed.returncode == 0, fixed.stderr
  assert "error:" not in fixed.stderr


def test_usage_mistakes_exit_2():
  for args in (["--tpu=v9-8"], ["--tpu=v3-8", "--config.batch=12"]):
    done = helpers.run_in_process(plan, *helpers.demo_args(), *args)
    assert done.returncode == 2, done.stderr
    (line,) = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert ("v3-8" in line) if "v9" in args[0] else ("divisible" in line), line
