"""Bounds on tensorstore's retries against Cloud Storage (orbax writes a checkpoint's
arrays through tensorstore's own GCS client, outside the storage layer), so that a store
that stops answering during a checkpoint write ends the run with the one line within
two minutes.

tensorstore's defaults retry each request 32 times, up to 32 s apart (about 15 minutes),
and wait on a stalled transfer with no limit: an outage as the first checkpoint's
objects appeared left a run silent for over 300 s. Here: 6 retries from 1 s to 16 s apart
(about 50 s), a connection that takes over 20 s or a transfer that moves nothing for 30 s
counts as a failed attempt. A transient error (a 503, a dropped connection) still gets
its retries. orbax has no public way to give its handlers a tensorstore context, so the
bound goes into its private base contexts; tests/training/runs/test_store_retries.py
checks that a save still opens its arrays with it, naming the orbax that changed them.
"""

import os

RETRIES = {"max_retries": 6, "initial_delay": "1s", "max_delay": "16s"}
CURL_LIMITS = {"TENSORSTORE_CURL_CONNECT_TIMEOUT_SECONDS": "20",
               "TENSORSTORE_CURL_LOW_SPEED_TIME_SECONDS": "30",
               "TENSORSTORE_CURL_LOW_SPEED_LIMIT_BYTES": "1"}


def bound() -> None:
  """Applies the bounds to the tensorstore contexts orbax creates from now on (a user's
  own TENSORSTORE_CURL_* settings win)."""
  # pylint: disable-next=import-outside-toplevel
  from orbax.checkpoint._src.serialization import tensorstore_utils as ts_utils
  for context in (ts_utils._BASE_TS_CONTEXT, ts_utils._DEFAULT_OCDBT_TS_CONTEXT):  # pylint: disable=protected-access
    context.setdefault("gcs_request_retries", dict(RETRIES))
  for name, value in CURL_LIMITS.items():
    os.environ.setdefault(name, value)
