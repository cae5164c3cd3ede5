"""Moving a folder on Cloud Storage (the emulator) object by object: its commit marker
first, an object that is gone skipped, one that cannot be moved left and named, and a
store that stops answering one line."""

import pytest

from vit_jax.base import object_moves, storage, url_clients


def _checkpoint(root):
  for name in ("commit_success.txt", "_CHECKPOINT_METADATA", "default/manifest.ocdbt",
               "default/d/abc"):
    storage.write_atomic(f"{root}/{name}", name)


def test_a_folder_moves_marker_first_and_whole(gcs, monkeypatch):
  root = f"gs://{gcs.bucket}/moves/whole"
  _checkpoint(f"{root}/4")
  fs, _ = url_clients.url_filesystem(root)
  moved = []
  real_mv = fs.mv
  monkeypatch.setattr(fs, "mv", lambda a, b, **kw: (moved.append(a), real_mv(a, b, **kw)))
  assert storage.move(f"{root}/4", f"{root}/aside/4-x") == []
  assert moved[0].endswith("/4/commit_success.txt") and len(moved) == 4
  assert storage.listdir(root) == ["aside"]
  assert storage.read_text(f"{root}/aside/4-x/default/d/abc") == "default/d/abc"


def test_an_object_gone_since_the_listing_is_skipped(gcs, monkeypatch):
  """array_metadatas/process_0 listed, then gone (a killed writer's): the move goes on."""
  root = f"gs://{gcs.bucket}/moves/gone"
  _checkpoint(f"{root}/6")
  fs, _ = url_clients.url_filesystem(root)
  real_find = fs.find
  monkeypatch.setattr(fs, "find", lambda key, **kw: [
      *real_find(key, **kw), f"{key}/array_metadatas/process_0"])
  assert storage.move(f"{root}/6", f"{root}/aside/6-x") == []
  assert storage.listdir(root) == ["aside"] and len(storage.listdir(f"{root}/aside/6-x")) == 3


def test_an_object_that_cannot_be_moved_is_left_and_named(gcs, monkeypatch):
  root = f"gs://{gcs.bucket}/moves/stuck"
  _checkpoint(f"{root}/8")
  fs, _ = url_clients.url_filesystem(root)
  real_mv = fs.mv

  def mv(source, dest, **kwargs):
    if source.endswith("manifest.ocdbt"):  # e.g. an upload still being finalised
      raise ValueError("Malformed StorageGeneration")
    return real_mv(source, dest, **kwargs)

  monkeypatch.setattr(fs, "mv", mv)
  left = storage.move(f"{root}/8", f"{root}/aside/8-x")
  assert left == [f"gs://{gcs.bucket}/moves/stuck/8/default/manifest.ocdbt"]
  assert storage.listdir(f"{root}/8") == ["default"]  # no commit marker: no checkpoint
  assert storage.exists(f"{root}/aside/8-x/commit_success.txt")


def test_a_store_that_stops_answering_mid_move_is_one_line(gcs, monkeypatch):
  root = f"gs://{gcs.bucket}/moves/lost"
  _checkpoint(f"{root}/2")
  fs, _ = url_clients.url_filesystem(root)
  monkeypatch.setattr(fs, "mv", lambda *a, **kw: (_ for _ in ()).throw(
      RuntimeError("Session is closed")))
  monkeypatch.setattr(storage, "_unreachable", {})
  with pytest.raises(storage.StorageUnavailable, match=(
      r"^lost the connection to gs:// while accessing gs://.*/moves/lost/2 \(Session is "
      r"closed\): check the connection")):
    storage.move(f"{root}/2", f"{root}/aside/2-x")
  assert object_moves.MARKERS == ("commit_success.txt",)
