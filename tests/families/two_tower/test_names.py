"""Released two-tower names: SigLIP from its Hub folder (a local Hub stand-in serving a tiny
SigLIP written by hf_layout.to_hf), then zero-shot by name in one command; LiT from the
closed bucket fails in one line; --list shows them."""

import json

import numpy as np
import pytest
from absl import flags
from flax import traverse_util

import two_tower_helpers
from conftest import REPO
from vit_jax import download, zeroshot
from vit_jax.checkpoints import npz, transfer
from vit_jax.checkpoints import hub
from vit_jax.families.two_tower import hf_layout
from vit_jax.families.two_tower import npz_file
from vit_jax.families.two_tower import names as two_tower_names

NAME = "SigLIP-B_16-224"
REPO_NAME = two_tower_names.NAMES[NAME].repo
CONFIG = {"model_type": "siglip",
          "text_config": {"vocab_size": 24, "hidden_size": 16, "intermediate_size": 32,
                          "num_hidden_layers": 1, "num_attention_heads": 2,
                          "max_position_embeddings": 8, "projection_size": 16},
          "vision_config": {"hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 1,
                            "num_attention_heads": 2, "image_size": 32, "patch_size": 8}}


@pytest.fixture(name="repo_files", scope="module")
def fixture_repo_files(tmp_path_factory):
  sentencepiece = pytest.importorskip("sentencepiece")
  from safetensors.numpy import save_file  # pylint: disable=import-outside-toplevel
  folder = tmp_path_factory.mktemp("siglip-repo")
  model = hf_layout.model_from_config(CONFIG)
  params = two_tower_helpers.random_params(model, 8)["params"]
  state = hf_layout.to_hf(traverse_util.flatten_dict(params, sep="/"), CONFIG)
  save_file(state, str(folder / "model.safetensors"))
  (folder / "config.json").write_text(json.dumps(CONFIG))
  (folder / "corpus.txt").write_text("\n".join(["a photo of a cat", "a dog", "china"] * 30))
  sentencepiece.SentencePieceTrainer.Train(
      input=str(folder / "corpus.txt"), model_prefix=str(folder / "spiece"), vocab_size=24,
      pad_id=0, eos_id=1, unk_id=2, bos_id=-1, minloglevel=2, hard_vocab_limit=False)
  return {name: (folder / name).read_bytes()
          for name in ("config.json", "model.safetensors", "spiece.model")}


@pytest.fixture(name="servers")
def fixture_servers(hub_servers, repo_files, tmp_path, monkeypatch):
  import hub_server  # pylint: disable=import-outside-toplevel
  site, bucket = hub_server.use_servers(*hub_servers, tmp_path, monkeypatch)
  monkeypatch.setitem(site.repos, REPO_NAME, repo_files)
  return site, bucket


def test_siglip_by_name_fetches_the_folder_then_zero_shot(servers, tmp_path, monkeypatch,
                                                          capsys):
  path = download.download(NAME, verbose=False)
  assert path.endswith(f"two-tower/{NAME}")
  model, params, info = npz_file.load_two_tower(path)
  assert info.tokenizer.endswith("spiece.model") and info.family == "siglip"
  site = servers[0]
  asked = len(site.requests)
  image = tmp_path / "cat.png"
  from PIL import Image  # pylint: disable=import-outside-toplevel
  Image.fromarray(np.full((40, 50, 3), 120, np.uint8)).save(image)
  values = flags.FlagValues()
  zeroshot.define_flags(values)
  zeroshot.main(values(["zeroshot", f"--checkpoint={NAME}", "--classes=cat,dog", "--json=-",
                        "--templates=class_name_only",
                        str(image)]), values)
  records = json.loads(capsys.readouterr().out)
  assert len(records) == 1 and len(records[0]["scores"]) == 2
  assert len(site.requests) == asked  # already there: not fetched again
  del model, params, monkeypatch


def test_lit_from_the_closed_bucket_fails_in_one_line(servers):
  with pytest.raises(transfer.DownloadError) as e:
    download.download("LiT-B16B_2", verbose=False)
  assert "\n" not in str(e.value)


def test_list_shows_the_two_tower_names():
  lines = two_tower_names.listing()
  assert any(line.startswith("LiT-B16B_2  (lit; gs://vit_models/lit/LiT-B16B_2.npz)")
             for line in lines)
  assert any("SigLIP2-So400m_14-384  (siglip2; hf-hub:google/siglip2-so400m-patch14-384)" in line
             for line in lines)


def test_a_released_name_resolves_to_its_fetched_folder_whose_tower_classifies(servers):
  path = hub.resolve(NAME)  # what config.pretrained=SigLIP-B_16-224 loads
  assert path == two_tower_names.local_path(NAME) and path.endswith(f"two-tower/{NAME}")
  module, params = npz.load_npz(path, num_classes=3)
  assert module.classifier == "map" and params["head"]["kernel"].shape == (16, 3)
  assert hub.resolve(path) == path  # anything else: as hub.resolve


@pytest.mark.parametrize("name, config, start", [
    ("SigLIP2-B_16", "configs/siglip2_b16.py", "SigLIP2-B_16-224"),
    ("siglip2-so400m_14", "configs/siglip2_so400m14.py", "SigLIP2-So400m_14-224"),
    ("SigLIP-L_16-384", "configs/siglip2_l16.py", "SigLIP-L_16-384"),
    ("LiT-B16B_2", None, "LiT-B16B_2")])
def test_a_two_tower_name_as_model_name_says_where_it_goes(name, config, start):
  """Not 'unknown model name; did you mean ViT-B_16' (the zoo's answer)."""
  line = two_tower_names.as_model_name(name)
  assert "\n" not in line and line.startswith(f"config.model_name={name} names a two-tower")
  assert line.endswith(f"python -m vit_jax.zeroshot --checkpoint={start} (python -m "
                       "vit_jax.download --list names them)")
  if config:
    assert f"--config={config} --config.pretrained={start};" in line
    assert (REPO / config).is_file()
  else:
    assert "has no fine-tuning config here" in line
  assert two_tower_names.as_model_name("ViT-B_16") is None
