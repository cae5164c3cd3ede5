"""The tests' Cloud Storage: gcp-storage-emulator (from PyPI) on 127.0.0.1, in a process of
its own; a `Link` relays one job's connections to it, so that a test can cut that job off
the store mid-run while the emulator goes on serving the others.

The emulator serves the JSON API that gcsfs and tensorstore speak, but ignores the
request preconditions (ifGenerationMatch / ifGenerationNotMatch) and sends no
x-goog-generation header with downloads. Real GCS does both, tensorstore's OCDBT writes
rely on them (without them a second commit fails with "Malformed StorageGeneration") and
so does our lock, so this launcher adds exactly those to the emulator's handlers:
412 when a generation precondition fails, 304 when a download's generation is unchanged,
the generation headers on downloads. It also parses multipart uploads exactly: the
emulator's email parser drops a line-break byte that ends the content (about one random
upload in a hundred arrived one byte short), which real GCS never does. And it serves
the Objects: move call (POST .../o/NAME/moveTo/o/NEW_NAME) that gcsfs tries first for every
rename: the emulator answered 501, which gcsfs retries as a server error for about 30 s
before it falls back to copy and delete. It serves one request at a time, so a client
that stops mid-request (a test's SIGSTOP) would hold every other one up: such a request
is dropped after STALLED_REQUEST_S, as a real server drops a stalled connection.
Everything else is the emulator as published.

Run as a script: python gcs_emulator.py PORT DATA_DIR BUCKET
"""

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from http import HTTPStatus


STALLED_REQUEST_S = 10


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


class Emulator:
  """A started emulator; `env` points gcsfs, tensorstore and etils.epath at it."""

  def __init__(self, data_dir: str, bucket: str = "bucket"):
    self.port, self.data_dir, self.bucket = _free_port(), data_dir, bucket
    self.endpoint = f"http://127.0.0.1:{self.port}"
    self.env = {
        "STORAGE_EMULATOR_HOST": self.endpoint,  # gcsfs (our files, orbax via epath)
        "TENSORSTORE_GCS_HTTP_URL": self.endpoint,  # orbax's arrays
        "GOOGLE_AUTH_TOKEN_FOR_TESTING": "test",  # tensorstore: no credential lookup
        "EPATH_USE_TF": "false",  # orbax's epath: fsspec (tf.io.gfile has no endpoint)
        # gcsfs's default class asks the storage-control gRPC API for the bucket layout,
        # which the emulator does not serve (a 60 s timeout per call).
        "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false",
    }
    self._process = None
    self.start()

  def start(self) -> None:
    self._process = subprocess.Popen(
        [sys.executable, __file__, str(self.port), self.data_dir, self.bucket],
        stdout=subprocess.DEVNULL, stderr=open(os.path.join(self.data_dir, "log"), "a"))
    deadline = time.time() + 30
    while True:
      try:
        socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
        return
      except OSError:
        if time.time() > deadline or self._process.poll() is not None:
          raise RuntimeError(f"the storage emulator did not start (see {self.data_dir}/log)")
        time.sleep(0.1)

  def stop(self) -> None:
    """Stops serving after the request in progress (clients then get connection refused)."""
    self._process.terminate()
    self._process.wait(timeout=30)


class Link:
  """A TCP relay from a port of its own to the emulator. A job whose `env` points at it
  loses the store when the link is `cut()`: its open connections are reset and new ones
  refused, as when a network drops, while others still reach the emulator directly."""

  def __init__(self, emulator: Emulator):
    self._target = ("127.0.0.1", emulator.port)
    self._listener = socket.create_server(("127.0.0.1", 0))
    endpoint = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
    self.env = {**emulator.env, "STORAGE_EMULATOR_HOST": endpoint,
                "TENSORSTORE_GCS_HTTP_URL": endpoint}
    self._sockets, self._lock, self._cut = [], threading.Lock(), False
    threading.Thread(target=self._accept, daemon=True).start()

  def _accept(self) -> None:
    while True:
      try:
        client, _ = self._listener.accept()
      except OSError:  # cut
        return
      upstream = socket.create_connection(self._target)
      with self._lock:
        self._sockets += [client, upstream]
        if self._cut:  # accepted just as the link was cut
          self._close_all()
          return
      for source, sink in ((client, upstream), (upstream, client)):
        threading.Thread(target=_relay, args=(source, sink), daemon=True).start()

  def cut(self) -> None:
    with self._lock:
      if self._cut:
        return
      self._cut = True
      self._listener.shutdown(socket.SHUT_RDWR)  # wakes accept()
      self._listener.close()
      self._close_all()

  def _close_all(self) -> None:
    for sock in self._sockets:
      try:
        sock.shutdown(socket.SHUT_RDWR)
      except OSError:
        pass
      sock.close()


def _relay(source: socket.socket, sink: socket.socket) -> None:
  try:
    while True:
      data = source.recv(1 << 16)
      if not data:
        sink.shutdown(socket.SHUT_WR)  # the sender finished: pass its end on
        return
      sink.sendall(data)
  except OSError:  # the link was cut, or the other side went away
    pass


def _add_preconditions():
  """Patches the emulator's handlers (see the module docstring) before its server module
  builds its routing table from them."""
  from gcp_storage_emulator import storage as storage_lib  # pylint: disable=import-outside-toplevel
  from gcp_storage_emulator.exceptions import NotFound  # pylint: disable=import-outside-toplevel
  from gcp_storage_emulator.handlers import objects  # pylint: disable=import-outside-toplevel

  class PreconditionFailed(Exception):
    pass

  expected = {}  # the upload in progress (the emulator serves one request at a time)

  def query(request, name):
    values = request.query.get(name)
    return values[0] if values else None

  def generation(storage, bucket, name):
    try:
      return str(storage.get_file_obj(bucket, name)["generation"])
    except NotFound:
      return "0"

  def refuse(response):
    response.status = HTTPStatus.PRECONDITION_FAILED
    response.json({"error": {"code": 412, "message": "conditionNotMet"}})

  create_file = storage_lib.Storage.create_file

  def checked_create_file(self, bucket_name, file_name, content, file_obj, file_id=None):
    wanted = expected.get("generation")
    if wanted is not None and generation(self, bucket_name, file_name) != wanted:
      raise PreconditionFailed
    return create_file(self, bucket_name, file_name, content, file_obj, file_id)

  insert, download, delete = objects.insert, objects.download, objects.delete

  def checked_insert(request, response, storage, *args, **kwargs):
    expected["generation"] = query(request, "ifGenerationMatch")
    try:
      return insert(request, response, storage, *args, **kwargs)
    except PreconditionFailed:
      refuse(response)
    finally:
      expected.clear()

  def checked_download(request, response, storage, *args, **kwargs):
    bucket, name = request.params["bucket_name"], request.params["object_id"]
    current = generation(storage, bucket, name)
    if current != "0":
      match = query(request, "ifGenerationMatch")
      if match is not None and match != current:
        return refuse(response)
      if query(request, "ifGenerationNotMatch") == current:
        response.status = HTTPStatus.NOT_MODIFIED
        return None
      response["x-goog-generation"] = current
      response["x-goog-metageneration"] = str(
          storage.get_file_obj(bucket, name).get("metageneration", "1"))
    return download(request, response, storage, *args, **kwargs)

  def checked_delete(request, response, storage, *args, **kwargs):
    match = query(request, "ifGenerationMatch")
    current = generation(storage, request.params["bucket_name"], request.params["object_id"])
    if match is not None and current != "0" and match != current:
      return refuse(response)
    return delete(request, response, storage, *args, **kwargs)

  storage_lib.Storage.create_file = checked_create_file
  objects.insert, objects.download, objects.delete = (checked_insert, checked_download,
                                                      checked_delete)


def _exact_multipart_uploads(server) -> None:
  """Reads a multipart/related upload (JSON metadata, then the content) byte for byte: the
  content is everything between its part's blank line and the line break that precedes
  the closing delimiter, in the line-break style the client used (gcsfs: LF)."""
  read_data = server._read_data  # pylint: disable=protected-access

  def exact_read_data(request_handler, query):
    content_type = request_handler.headers.get("Content-Type") or ""
    if not content_type.startswith("multipart/related"):
      return read_data(request_handler, query)
    raw = server._decode_raw_data(server._read_raw_data(request_handler), request_handler)  # pylint: disable=protected-access
    delimiter = b"--" + content_type.split("boundary=", 1)[1].strip('"').encode()
    newline = b"\r\n" if raw.startswith(delimiter + b"\r\n") else b"\n"
    body = raw[len(delimiter + newline):]
    meta_part, rest = body.split(newline + delimiter + newline, 1)
    content_part = rest[:rest.rindex(newline + delimiter + b"--")]
    headers, _, content = content_part.partition(newline + newline)
    part_type = "application/octet-stream"
    for line in headers.decode("latin-1").splitlines():
      if line.lower().startswith("content-type:"):
        part_type = line.split(":", 1)[1].strip()
    return {"meta": json.loads(meta_part.partition(newline + newline)[2]), "content": content,
            "content-type": part_type}

  server._read_data = exact_read_data  # pylint: disable=protected-access


def _move_objects(server) -> None:
  """Objects: move within a bucket (a copy under the new name, then the old one deleted),
  answered like GCS: the moved object's resource, or 404 when the source is missing."""
  from gcp_storage_emulator.exceptions import NotFound  # pylint: disable=import-outside-toplevel
  from gcp_storage_emulator.handlers import objects  # pylint: disable=import-outside-toplevel

  def move(request, response, storage, *args, **kwargs):
    bucket, name = request.params["bucket_name"], request.params["object_id"]
    try:
      moved = objects._copy(request.base_url, storage, bucket, name, bucket,  # pylint: disable=protected-access
                            request.params["dest_object_id"])
      storage.delete_file(bucket, name)
    except NotFound:
      response.status = HTTPStatus.NOT_FOUND
      return
    response.json(moved)

  route = (r"^/storage/v1/b/(?P<bucket_name>[-.\w]+)/o/(?P<object_id>.*[^/]+)/moveTo/o/"
           r"(?P<dest_object_id>.*[^/]+)$", {"POST": move})
  server.HANDLERS = (route, *server.HANDLERS)  # looked up per request, first match wins


def _serve(port: int, data_dir: str, bucket: str) -> None:
  # SIGTERM (Emulator.stop) ends the server between requests, as the emulator's own Ctrl-C
  # does: killed mid-request it could leave its metadata file half written, which a
  # restart on the same data then fails to read.
  signal.signal(signal.SIGTERM, signal.default_int_handler)
  _add_preconditions()
  from gcp_storage_emulator import server  # pylint: disable=import-outside-toplevel
  _exact_multipart_uploads(server)
  _move_objects(server)
  server.RequestHandler.timeout = STALLED_REQUEST_S  # on each read of a request
  storage_dir = os.path.join(data_dir, "storage")
  fresh = not os.path.exists(storage_dir)
  os.makedirs(storage_dir, exist_ok=True)
  server.create_server("127.0.0.1", port, in_memory=False, data_dir=storage_dir,
                       default_bucket=bucket if fresh else None).run()


if __name__ == "__main__":
  _serve(int(sys.argv[1]), sys.argv[2], sys.argv[3])
