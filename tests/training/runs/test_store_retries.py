"""tensorstore's retries against Cloud Storage are bounded for the checkpoints orbax
writes of a gs:// workdir (about 50 s instead of about 15 minutes), and a user's own
curl limits win."""

import os

from orbax.checkpoint._src.serialization import tensorstore_utils as ts_utils

from vit_jax.training.runs import store_retries


def test_orbax_contexts_carry_the_bound_and_curl_limits(monkeypatch):
  for context in (ts_utils._BASE_TS_CONTEXT, ts_utils._DEFAULT_OCDBT_TS_CONTEXT):  # pylint: disable=protected-access
    monkeypatch.setitem(context, "gcs_request_retries", None)
    context.pop("gcs_request_retries")
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
