"""python -m vit_jax.zeroshot on a Hugging Face Siglip2Model (NaFlex) folder saved by
transformers: without --max_patches it is read as transformers reads it, each image at its
own aspect ratio in its processor's budget (256 without a preprocessor_config.json), and
scores as Siglip2Model does; a damaged weights file is named."""

import json

import numpy as np
import pytest
from PIL import Image

from helpers import run_in_process
from torch_libraries import (  # noqa: F401  # pylint: disable=unused-import
    declare_missing_torchvision_ops, fixture_torch)
from vit_jax import zeroshot
from vit_jax.data import text_tokens
from vit_jax.families.two_tower import hf_layout

PATCH, CLASSES = 8, ["cat", "flower"]


@pytest.fixture(name="transformers")
def fixture_transformers(torch):
  declare_missing_torchvision_ops(torch)
  return pytest.importorskip("transformers")


@pytest.fixture(name="folder")
def fixture_folder(transformers, torch, tmp_path):
  """(folder of a random Siglip2Model with its spiece.model, the model)."""
  sentencepiece = pytest.importorskip("sentencepiece")
  (tmp_path / "corpus.txt").write_text("\n".join(["a photo of a cat", "a flower", "china"] * 30))
  sentencepiece.SentencePieceTrainer.Train(
      input=str(tmp_path / "corpus.txt"), model_prefix=str(tmp_path / "spiece"),
      vocab_size=18, pad_id=0, eos_id=1, unk_id=2, bos_id=-1, minloglevel=2)
  config = transformers.Siglip2Config(
      text_config=dict(vocab_size=18, hidden_size=16, intermediate_size=32,
                       num_hidden_layers=1, num_attention_heads=2, max_position_embeddings=8,
                       projection_size=24),
      vision_config=dict(hidden_size=24, intermediate_size=40, num_hidden_layers=1,
                         num_attention_heads=3, patch_size=PATCH, num_patches=16))
  torch.manual_seed(0)
  model = transformers.Siglip2Model(config)
  with torch.no_grad():
    for p in model.parameters():
      p.normal_(0, 0.3)
  model.eval().save_pretrained(tmp_path / "hf")
  (tmp_path / "spiece.model").rename(tmp_path / "hf" / "spiece.model")
  return tmp_path / "hf", model


def test_a_siglip2_folder_scores_as_transformers_reads_it(folder, transformers, torch,
                                                          tmp_path):
  path, model = folder
  rng = np.random.default_rng(3)
  pixels = [rng.integers(0, 256, shape, np.uint8) for shape in ((37, 101, 3), (90, 40, 3))]
  files = []
  for i, image in enumerate(pixels):
    files.append(str(tmp_path / f"{i}.png"))
    Image.fromarray(image).save(files[-1])
  done = run_in_process(zeroshot, f"--checkpoint={path}", "--json=-",
                        "--classes=" + ",".join(CLASSES), "--templates=class_name_only", *files)
  assert done.returncode == 0, done.stderr
  ours = np.array([record["scores"] for record in json.loads(done.stdout)])
  processor = pytest.importorskip(
      "transformers.models.siglip2.image_processing_pil_siglip2").Siglip2ImageProcessorPil(
          patch_size=PATCH, max_num_patches=hf_layout.DEFAULT_BUDGET)
  inputs = processor(pixels, return_tensors="np", input_data_format="channels_last")
  tokens = text_tokens.for_model(str(path / "spiece.model"), lower=True, max_len=8,
                                 bert=False)(CLASSES)
  with torch.no_grad():
    logits = model(input_ids=torch.tensor(np.asarray(tokens), dtype=torch.long),
                   pixel_values=torch.tensor(inputs["pixel_values"]),
                   pixel_attention_mask=torch.tensor(inputs["pixel_attention_mask"]),
                   spatial_shapes=torch.tensor(inputs["spatial_shapes"])).logits_per_image
  np.testing.assert_allclose(ours, torch.sigmoid(logits).numpy(), rtol=1e-4, atol=1e-5)


def test_the_budget_is_the_processors_and_a_damaged_file_is_named(folder):
  path, _ = folder
  config = json.loads((path / "config.json").read_text())
  assert hf_layout.naflex_budget(str(path), config) == hf_layout.DEFAULT_BUDGET
  (path / hf_layout.PROCESSOR_CONFIG).write_text(json.dumps({"max_num_patches": 576}))
  assert hf_layout.naflex_budget(str(path / "model.safetensors"), config) == 576
  assert hf_layout.naflex_budget(str(path), dict(config, model_type="siglip")) is None
  (path / hf_layout.PROCESSOR_CONFIG).write_text(json.dumps({"max_num_patches": "many"}))
  with pytest.raises(ValueError, match="max_num_patches='many' must be a whole number"):
    hf_layout.naflex_budget(str(path), config)
  weights = path / "model.safetensors"
  weights.write_bytes(weights.read_bytes()[:1000])
  assert run_in_process(zeroshot, f"--checkpoint={path}", "--classes=cat",
                        "x.png").returncode != 0  # x.png is missing: told before the load
  done = run_in_process(zeroshot, f"--checkpoint={path}", "--classes=cat",
                        str(path / "config.json"))
  assert done.returncode == 1 and f"{weights} is not a readable .safetensors file" in done.stderr
  assert len(done.stderr.strip().splitlines()) == 1
