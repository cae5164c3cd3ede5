"""Every way the storage clients say that a store stopped answering is the one line
(storage.StorageUnavailable), and an answer ("not found", "exists") is not."""

import asyncio
import concurrent.futures

import aiohttp
import gcsfs.retry
import pytest

from vit_jax.base import storage, store_faults

LOST = {
    "aiohttp session closed (gcsfs)": RuntimeError("Session is closed"),
    "server disconnected": aiohttp.ServerDisconnectedError(),
    "connection refused": aiohttp.ClientConnectionError("Cannot connect to host 127.0.0.1"),
    "asyncio timeout": asyncio.TimeoutError(),
    "socket timeout": TimeoutError("timed out"),
    "cancelled future": concurrent.futures.CancelledError(),
    "cancelled task": asyncio.CancelledError(),
    "connection reset": ConnectionResetError(104, "Connection reset by peer"),
    "5xx after retries": gcsfs.retry.HttpError({"code": 503, "message": "Service Unavailable"}),
    "throttled after retries": gcsfs.retry.HttpError({"code": 429, "message": "slow down"}),
    "tensorstore": ValueError("UNAVAILABLE: CURL error Couldn't connect to server"),
    "tensorstore deadline": ValueError("DEADLINE_EXCEEDED: ..."),
}
ANSWERS = {
    "not found": FileNotFoundError("gone"),
    "exists": FileExistsError("412"),
    "forbidden": PermissionError("403"),
    "bad request": gcsfs.retry.HttpError({"code": 400, "message": "Invalid argument"}),
    "a bug": ValueError("shapes (3,) and (4,) differ"),
    "another RuntimeError": RuntimeError("dictionary changed size during iteration"),
}


@pytest.mark.parametrize("case", LOST)
def test_a_store_that_stopped_answering_is_one_line(case, monkeypatch):
  monkeypatch.setattr(storage, "_unreachable", {})
  error = LOST[case]
  assert store_faults.stopped_answering(error)

  @storage._store_errors  # pylint: disable=protected-access
  def call(path):
    raise error

  with pytest.raises(storage.StorageUnavailable) as raised:
    call("gs://bucket/run/config.json")
  message = str(raised.value)
  assert message.startswith("lost the connection to gs:// while accessing gs://bucket/run/"
                            "config.json (") and "\n" not in message
  assert message.endswith("then rerun the same command (a run resumes from its last "
                          "complete checkpoint; checkpoints are saved whole or not at all)")
  with pytest.raises(storage.StorageUnavailable):  # later calls fail at once
    storage.read_bytes("gs://bucket/run/other")


@pytest.mark.parametrize("case", ANSWERS)
def test_an_answer_or_a_bug_is_not_a_lost_connection(case, monkeypatch):
  monkeypatch.setattr(storage, "_unreachable", {})
  error = ANSWERS[case]
  assert not store_faults.stopped_answering(error)

  @storage._store_errors  # pylint: disable=protected-access
  def call(path):
    raise error

  with pytest.raises(type(error)):
    call("gs://bucket/run/config.json")
  assert not storage.connection_lost("gs://bucket/run/config.json")


def test_a_long_reason_is_cut_at_a_word(monkeypatch):
  monkeypatch.setattr(storage, "_unreachable", {})
  message = str(storage.unavailable("gs://b/x", OSError("word " * 100)))
  assert "(word word" in message and "wor ..." not in message and "word ...):" in message
