"""tensorstore's retries against Cloud Storage are bounded for the checkpoints orbax
writes of a gs:// workdir (about 50 s instead of about 15 minutes), and a user's own
curl limits win. The bound goes through orbax's private base contexts (there is no
public way to hand orbax's handlers a tensorstore context): a save's own contexts are
checked here, so that an orbax that renames or stops reading them fails by name."""

import importlib.metadata
import os

import numpy as np
import orbax.checkpoint as ocp
import tensorstore as ts
from orbax.checkpoint._src.serialization import tensorstore_utils as ts_utils

from vit_jax.training.runs import store_retries

CHANGED = (f"orbax-checkpoint {importlib.metadata.version('orbax-checkpoint')} changed "
           "tensorstore_utils._BASE_TS_CONTEXT / _DEFAULT_OCDBT_TS_CONTEXT, which "
           "vit_jax/training/runs/store_retries.py relies on")


def _unbound(monkeypatch):
  """orbax's contexts as orbax ships them, restored after the test."""
  for name in ("_BASE_TS_CONTEXT", "_DEFAULT_OCDBT_TS_CONTEXT"):
    context = getattr(ts_utils, name, None)
    assert isinstance(context, dict), CHANGED
    monkeypatch.setitem(context, "gcs_request_retries", None)
    context.pop("gcs_request_retries")


def test_orbax_contexts_carry_the_bound_and_curl_limits(monkeypatch):
  _unbound(monkeypatch)
  monkeypatch.setenv("TENSORSTORE_CURL_LOW_SPEED_TIME_SECONDS", "90")  # the user's
  monkeypatch.delenv("TENSORSTORE_CURL_CONNECT_TIMEOUT_SECONDS", raising=False)
  store_retries.bound()
  for use_ocdbt in (True, False):
    retries = ts_utils.get_ts_context(use_ocdbt=use_ocdbt)["gcs_request_retries"].to_json()
    assert retries["max_retries"] == 6 and retries["max_delay"] == "16s"
  assert os.environ["TENSORSTORE_CURL_LOW_SPEED_TIME_SECONDS"] == "90"
  assert os.environ["TENSORSTORE_CURL_CONNECT_TIMEOUT_SECONDS"] == "20"
  worst = sum(min(2 ** i, 16) for i in range(store_retries.RETRIES["max_retries"]))
  assert worst < 60  # the backoff alone, well inside the two minutes a run may take


def test_a_checkpoint_save_opens_its_arrays_with_the_bound(monkeypatch, tmp_path):
  """The contexts orbax's CheckpointManager (as orbax_checkpoints uses it) opens arrays
  with, on a local folder: the same code as for gs://."""
  _unbound(monkeypatch)
  monkeypatch.setattr(store_retries, "CURL_LIMITS", {})  # tested above; kept out of os.environ
  store_retries.bound()
  contexts, open_store = [], ts.open

  def recording_open(*args, **kwargs):
    contexts.append(kwargs.get("context"))
    return open_store(*args, **kwargs)

  monkeypatch.setattr(ts, "open", recording_open)
  with ocp.CheckpointManager(tmp_path, options=ocp.CheckpointManagerOptions(create=True)) as m:
    m.save(1, args=ocp.args.StandardSave({"kernel": np.ones((2, 3), np.float32)}), force=True)
    m.wait_until_finished()
  assert contexts, f"{CHANGED}: a save opened no tensorstore"
  for context in contexts:
    retries = context["gcs_request_retries"].to_json() if context is not None else {}
    assert retries.get("max_retries") == 6 and retries.get("max_delay") == "16s", CHANGED
