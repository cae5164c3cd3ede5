"""vit_jax.base.platforms: no TPU backend, and none of libtpu's start-up lines, without a TPU."""

import os
import subprocess
import sys

import pytest

import helpers
from vit_jax.base import platforms

STARTS_JAX = "import vit_jax, jax; print(jax.default_backend(), jax.config.jax_platforms)"

pytest.importorskip("libtpu", reason="compiling for TPUs needs libtpu (the test extra)")


def test_a_process_without_tpus_starts_quietly_on_its_other_devices():
  env = {k: v for k, v in helpers.subprocess_env().items() if k != "JAX_PLATFORMS"}
  done = subprocess.run([sys.executable, "-c", STARTS_JAX], capture_output=True, text=True,
                        env=env, timeout=120, check=True)
  assert done.stdout.split() == ["cpu", platforms.platforms_without_tpu()]
  assert done.stderr == "", done.stderr  # libtpu wrote 8 lines here before


def test_the_users_jax_platforms_is_kept():
  done = subprocess.run([sys.executable, "-c", STARTS_JAX], capture_output=True, text=True,
                        env=helpers.subprocess_env(JAX_PLATFORMS="cpu"), timeout=120,
                        check=True)
  assert done.stdout.split() == ["cpu", "cpu"]


def test_quiet_stderr_catches_what_c_code_writes():
  with platforms.quiet_stderr() as captured:
    os.write(2, b"Failed to find host bounds\n")
  assert captured == ["Failed to find host bounds"]
  assert not platforms.tpu_attached()  # this CI machine: the test above relies on it
