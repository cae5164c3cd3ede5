"""A local stand-in for the Hugging Face Hub's file API and for a bucket (that says 403).

HubServer answers what huggingface_hub's hf_hub_download asks: HEAD and GET on
/{org}/{name}/resolve/{revision}/{file} with X-Repo-Commit, ETag (the sha256 of the file,
as the Hub sends for large files), X-Linked-Etag and X-Linked-Size, Content-Length, and
Range requests (resumed downloads); a missing repository or file is a 404 with the Hub's
X-Error-Code (RepoNotFound, EntryNotFound). `tamper` makes a file be served truncated
(the connection closes early) or altered (same length, other bytes).
"""

import hashlib
import http.server
import json
import os
import threading
from typing import Dict, Optional

from conftest import RELEASED_FIXTURES, init_params, tiny_model
from vit_jax.checkpoints import format_conversion, npz, released

COMMIT = "0123456789abcdef0123456789abcdef01234567"


class _Handler(http.server.BaseHTTPRequestHandler):
  protocol_version = "HTTP/1.1"
  server: "_Server"

  def log_message(self, *args):  # pylint: disable=arguments-differ
    pass

  def _send(self, code: int, headers: Dict[str, str], body: bytes = b"") -> None:
    self.send_response(code)
    for key, value in headers.items():
      self.send_header(key, value)
    self.end_headers()
    if self.command != "HEAD" and body:
      try:
        self.wfile.write(body)
      except (BrokenPipeError, ConnectionResetError):
        pass

  def _error(self, code: int, error_code: str) -> None:
    body = f'{{"error": "{error_code}"}}'.encode()
    self._send(code, {"X-Error-Code": error_code, "X-Error-Message": error_code,
                      "Content-Type": "application/json", "Content-Length": str(len(body)),
                      "X-Repo-Commit": COMMIT}, body)

  def do_HEAD(self):  # pylint: disable=invalid-name
    self.do_GET()

  def do_GET(self):  # pylint: disable=invalid-name
    self.server.requests.append(f"{self.command} {self.path}")
    if self.server.forbid:
      self._error(403, "Forbidden")
      return
    if self.path in self.server.files:  # a bucket's object
      self._serve(self.path, self.server.files[self.path])
      return
    parts = self.path.split("?")[0].strip("/").split("/")
    if len(parts) < 5 or parts[2] != "resolve":
      self._error(404, "RepoNotFound")
      return
    repo, filename = "/".join(parts[:2]), "/".join(parts[4:])
    files = self.server.repos.get(repo)
    if files is None:
      self._error(404, "RepoNotFound")
      return
    if filename not in files:
      self._error(404, "EntryNotFound")
      return
    self._serve(f"{repo}/{filename}", files[filename])

  def _serve(self, name: str, data: bytes) -> None:
    sha = hashlib.sha256(data).hexdigest()
    tamper = self.server.tamper.get(name)
    if tamper == "altered" and self.command == "GET":
      data = bytes(b ^ 0xFF for b in data[:64]) + data[64:]
    start = 0
    if self.headers.get("Range", "").startswith("bytes="):
      start = int(self.headers["Range"][len("bytes="):].split("-")[0] or 0)
    body = data[start:]
    headers = {"X-Repo-Commit": COMMIT, "ETag": f'"{sha}"', "X-Linked-Etag": f'"{sha}"',
               "X-Linked-Size": str(len(data)), "Content-Length": str(len(body)),
               "Accept-Ranges": "bytes", "Content-Type": "application/octet-stream"}
    if tamper == "truncated" and self.command == "GET":
      self._send(206 if start else 200, headers, body[:len(body) // 2])
      self.close_connection = True
      return
    self._send(206 if start else 200, headers, body)


class _Server(http.server.ThreadingHTTPServer):
  daemon_threads = True
  repos: Dict[str, Dict[str, bytes]]
  files: Dict[str, bytes]
  tamper: Dict[str, str]
  requests: list
  forbid: bool


class HubServer:
  """Serves `repos` ({'org/name': {file: bytes}}) and `files` ({'/bucket/path': bytes}, a
  bucket's objects) on 127.0.0.1; `forbid=True` answers 403 to everything (the closed
  bucket)."""

  def __init__(self, repos: Optional[Dict[str, Dict[str, bytes]]] = None, forbid=False):
    self.server = _Server(("127.0.0.1", 0), _Handler)
    self.server.repos, self.server.files, self.server.tamper = dict(repos or {}), {}, {}
    self.server.requests, self.server.forbid = [], forbid
    self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)
    self.thread.start()

  @property
  def url(self) -> str:
    return f"http://127.0.0.1:{self.server.server_address[1]}"

  @property
  def repos(self) -> Dict[str, Dict[str, bytes]]:
    return self.server.repos

  @property
  def files(self) -> Dict[str, bytes]:
    return self.server.files

  @property
  def tamper(self) -> Dict[str, str]:
    return self.server.tamper

  @property
  def requests(self) -> list:
    return self.server.requests

  def close(self) -> None:
    self.server.shutdown()
    self.server.server_close()
    self.thread.join()


def repo_files(folder: str) -> Dict[str, bytes]:
  """The files of a model folder (as vit_jax.convert writes it), for HubServer."""
  return {name: open(os.path.join(folder, name), "rb").read() for name in os.listdir(folder)}


def hub_timm_config(folder, architecture):
  """config.json as timm's Hub repositories have it: the architecture and pretrained_cfg,
  no model_args (so neither the activation nor the sizes are stated)."""
  path = os.path.join(folder, "config.json")
  with open(path, encoding="utf-8") as f:
    config = json.load(f)
  config = {"architecture": architecture, "num_classes": config["num_classes"],
            "num_features": config["num_features"], "global_pool": "token",
            "pretrained_cfg": {"tag": "augreg_in21k", "mean": [0.5] * 3, "std": [0.5] * 3}}
  with open(path, "w", encoding="utf-8") as f:
    json.dump(config, f)


def google_config(folder):
  """Google's conversions say hidden_act 'gelu' and transformers' default eps 1e-12,
  although the weights were trained with the tanh GELU and LayerNorm eps 1e-6."""
  path = os.path.join(folder, "config.json")
  with open(path, encoding="utf-8") as f:
    config = json.load(f)
  config.update(hidden_act="gelu", layer_norm_eps=1e-12)
  with open(path, "w", encoding="utf-8") as f:
    json.dump(config, f)


def flax_msgpack(folder) -> bytes:
  """The flax_model.msgpack that transformers' Flax ViT classes save for an HF folder's
  model.safetensors: the same values under the Flax module's names, as transformers'
  PyTorch -> Flax conversion writes them (Linear weight -> kernel transposed, Conv OIHW ->
  HWIO, LayerNorm weight -> scale), serialized with flax.serialization."""
  from flax import serialization, traverse_util  # pylint: disable=import-outside-toplevel
  from safetensors.numpy import load_file  # pylint: disable=import-outside-toplevel
  tree = {}
  for name, value in load_file(os.path.join(folder, "model.safetensors")).items():
    *parents, leaf = name.split(".")
    if leaf == "weight" and "layernorm" in parents[-1]:
      leaf = "scale"
    elif leaf == "weight":
      leaf, value = "kernel", value.transpose(2, 3, 1, 0) if value.ndim == 4 else value.T
    tree[(*parents, leaf)] = value
  return serialization.msgpack_serialize(traverse_util.unflatten_dict(tree))


def as_flax_repo(folder) -> Dict[str, bytes]:
  """An HF folder's repository as the four google/vit-large-* ones are: config.json and
  flax_model.msgpack, no model.safetensors (their pytorch_model.bin needs PyTorch, and
  tf_model.h5 TensorFlow's Keras model: vit_jax reads neither)."""
  return {"config.json": open(os.path.join(folder, "config.json"), "rb").read(),
          "flax_model.msgpack": flax_msgpack(folder)}


def converted(src, dst, **kwargs):
  format_conversion.convert(str(src), str(dst), **kwargs)
  return str(dst)


def with_config(files, config):
  return {**files, "config.json": json.dumps(config).encode()}


# Google's repositories without model.safetensors (on the Hub as here).
FLAX_ONLY_IN21K = ("google/vit-large-patch32-224-in21k",)
FLAX_ONLY_FINETUNED = ("google/vit-large-patch16-224", "google/vit-large-patch16-384",
                       "google/vit-large-patch32-384")
# The repository of the notebook's online start (imagenet21k+imagenet2012/ViT-B_16's copy).
NOTEBOOK_REPO = "timm/vit_base_patch16_384.orig_in21k_ft_in1k"


def tiny_repo_files(root) -> Dict[str, bytes]:
  """A tiny 3-class ViT (conftest.tiny_model) in timm's layout: its repository's files."""
  os.makedirs(root, exist_ok=True)
  npz.save_npz(init_params(tiny_model(num_classes=3), 16), str(root / "tiny.npz"))
  return repo_files(converted(root / "tiny.npz", root / "timm_tiny", to="timm"))


def build_repos(root) -> Dict[str, Dict[str, bytes]]:
  """{repository: files}: released-format fixtures (and a tiny model) in the layouts of
  timm's and Google's repositories, plus repositories that are no ViT vit_jax computes."""
  timm_ti = converted(RELEASED_FIXTURES / "vit-ti16.npz", root / "timm_ti", to="timm")
  hub_timm_config(timm_ti, "vit_tiny_patch16_224")
  timm_r = converted(RELEASED_FIXTURES / "r-vit-ti16.npz", root / "timm_r", to="timm")
  hub_timm_config(timm_r, "vit_tiny_r_s16_p8_224")
  google = converted(RELEASED_FIXTURES / "vit-ti16-prelogits.npz", root / "google", to="hf",
                     pre_logits="pooler")
  google_config(google)
  google_head = converted(RELEASED_FIXTURES / "vit-ti16.npz", root / "google_head", to="hf")
  google_config(google_head)
  tiny_files = tiny_repo_files(root)
  return {
      **{repo: as_flax_repo(google) for repo in FLAX_ONLY_IN21K},
      **{repo: as_flax_repo(google_head) for repo in FLAX_ONLY_FINETUNED},
      "timm/vit_tiny_patch16_224.augreg_in21k": repo_files(timm_ti),
      "timm/vit_tiny_r_s16_p8_224.augreg_in21k": repo_files(timm_r),
      "google/vit-base-patch16-224-in21k": {**repo_files(google),  # both, as on the Hub
                                            **as_flax_repo(google)},
      "timm/vit_base_patch32_224.orig_in21k": tiny_files,  # google's B/32 copy is missing
      NOTEBOOK_REPO: tiny_files,
      "timm/vit_tiny_patch16_224.augreg2_test": repo_files(timm_ti),  # not a bucket file
      "timm/vit_base_patch16_clip_224.openai": with_config(tiny_files, {
          "architecture": "vit_base_patch16_clip_224", "num_classes": 3}),
      "someone/resnet": with_config(tiny_files, {"architecture": "resnet50"}),
      "facebook/deit-tiny": with_config(tiny_files, {"model_type": "deit"}),
      "someone/weights-only": {"model.safetensors": tiny_files["model.safetensors"]},
  }


def use_servers(hub_site: HubServer, bucket: HubServer, tmp_path, monkeypatch):
  """The Hub stand-in as HF_ENDPOINT, the 403 bucket as the storage host, a fresh
  huggingface_hub cache, cwd in tmp_path (checkpoints/ lands there)."""
  import huggingface_hub.constants  # pylint: disable=import-outside-toplevel
  monkeypatch.setenv("HF_ENDPOINT", hub_site.url)
  monkeypatch.setenv(released.EMULATOR_ENV, bucket.url)
  monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
  monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
  monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hf_cache"))
  monkeypatch.chdir(tmp_path)
  for server in (hub_site, bucket):
    server.requests.clear()
    server.tamper.clear()
    server.files.clear()
  return hub_site, bucket
