"""The main job training image-text pairs (configs/siglip_demo.py, configs/lit_demo.py, cut
short): the run's params.npz is a pair load_two_tower and vit_jax.zeroshot read with the
vocabulary kept beside it, that convert writes as a SiglipModel folder transformers runs with
the same logits and export writes as towers; a run preempted and resumed ends bit-identical to one that was
not; LiT's locked image tower leaves the run bit-identical to the classifier it came from."""

import json
import os

import numpy as np
import pytest

from helpers import load_module, sigterm_at_step
from torch_libraries import (  # noqa: F401  # pylint: disable=unused-import
    declare_missing_torchvision_ops, fixture_torch)
from vit_jax import create_model, export, load_two_tower, save_npz
from vit_jax.checkpoints import format_conversion
from vit_jax.data import device_batches
from vit_jax.training import loop

SHORT = dict(total_steps=6, batch=32, batch_eval=128, progress_every=2, eval_every=3,
             checkpoint_every=3, warmup_steps=2)


def short(config_file, *args, **overrides):
  config = load_module(config_file).get_config(*args)
  config.update({**SHORT, **overrides})
  config.text.update(depth=1)
  return config


@pytest.fixture(name="run", scope="module")
def fixture_run(tmp_path_factory):
  workdir = str(tmp_path_factory.mktemp("pair") / "run")
  return workdir, loop.train_and_evaluate(short("siglip_demo.py"), workdir)


def test_the_run_writes_a_pair_zeroshot_reads(run, tmp_path):
  workdir, result = run
  assert 0 <= result["zeroshot/zeroshot/top1"] <= 1
  model, params, info = load_two_tower(os.path.join(workdir, "params.npz"))
  assert info.family == "siglip" and info.tokenizer == os.path.join(workdir, "vocab.txt")
  assert set(params) == {"img", "txt", "t", "b"}
  assert model.txt.max_len == 16
  rows = [json.loads(line) for line in open(os.path.join(workdir, "metrics.jsonl"))]
  assert [row["step"] for row in rows if "zeroshot/zeroshot/top1" in row] == [3, 6]


def test_a_preempted_run_resumes_bit_identical(run, tmp_path, monkeypatch):
  workdir, _ = run
  other = str(tmp_path / "run")
  monkeypatch.setattr(device_batches, "prefetch_to_device", sigterm_at_step(4))
  first = loop.train_and_evaluate(short("siglip_demo.py"), other)
  assert first["preempted_at_step"] == 4
  monkeypatch.undo()
  loop.train_and_evaluate(short("siglip_demo.py"), other)
  with np.load(os.path.join(workdir, "params.npz")) as a, \
       np.load(os.path.join(other, "params.npz")) as b:
    assert sorted(a.files) == sorted(b.files)
    assert all(np.array_equal(a[k], b[k]) for k in a.files)


def test_lit_keeps_the_classifier_s_image_tower_bit_identical(tmp_path):
  import conftest  # pylint: disable=import-outside-toplevel
  classifier = create_model("ViT-Ti_16", num_classes=10, patch_size=4, hidden_size=64,
                            mlp_dim=128, num_heads=4, num_layers=4)
  path = str(tmp_path / "classifier.npz")
  save_npz(conftest.random_params(classifier, 16), path)
  result = loop.train_and_evaluate(short("lit_demo.py", path), str(tmp_path / "lit"))
  assert "zeroshot/zeroshot/top1" in result
  _, params, info = load_two_tower(str(tmp_path / "lit" / "params.npz"))
  assert info.family == "lit" and "b" not in params
  with np.load(path) as before, np.load(tmp_path / "lit" / "params.npz") as after:
    image = [k for k in before.files if not k.startswith("head/")]
    assert len(image) > 20
    assert all(np.array_equal(before[k], after["img/" + k]) for k in image)


def test_zeroshot_reads_the_checkpoint_of_a_step_as_that_step_s_file(run):
  import jax  # pylint: disable=import-outside-toplevel
  from vit_jax import zeroshot  # pylint: disable=import-outside-toplevel
  workdir, _ = run
  final = zeroshot.open_model(os.path.join(workdir, "params.npz"), None, None)
  step = zeroshot.open_model(os.path.join(workdir, "checkpoints", "6"), None, None)
  assert jax.tree.all(jax.tree.map(np.array_equal, final.params, step.params))
  texts = ["the handwritten number seven.", "a blurry scan of the digit one"]
  np.testing.assert_array_equal(final.embed_texts(texts), step.embed_texts(texts))
  earlier = zeroshot.open_model(os.path.join(workdir, "checkpoints", "3"), None, None)
  assert not np.array_equal(earlier.params["t"], final.params["t"])


def test_convert_and_export_take_the_run_s_pair(run, tmp_path, torch):
  declare_missing_torchvision_ops(torch)
  transformers = pytest.importorskip("transformers")
  workdir, _ = run
  model, params, _ = load_two_tower(os.path.join(workdir, "params.npz"))
  rng = np.random.default_rng(0)
  images = rng.uniform(-1, 1, (2, 16, 16, 3)).astype(np.float32)
  tokens = rng.integers(0, model.txt.vocab_size, (3, 16)).astype(np.int32)
  ours = np.asarray(model.apply({"params": params}, images, tokens)[2])
  format_conversion.convert(os.path.join(workdir, "params.npz"), str(tmp_path / "hf"), to="hf")
  assert (tmp_path / "hf" / "vocab.txt").read_text() == open(
      os.path.join(workdir, "vocab.txt")).read()
  hf_model = transformers.SiglipModel.from_pretrained(str(tmp_path / "hf")).eval()
  with torch.no_grad():
    theirs = hf_model(input_ids=torch.tensor(tokens, dtype=torch.long),
                      pixel_values=torch.tensor(images.transpose(0, 3, 1, 2))).logits_per_image
  np.testing.assert_allclose(theirs.numpy(), ours, rtol=1e-4, atol=1e-4)
  result = export.export(os.path.join(workdir, "params.npz"), str(tmp_path / "out"),
                         to="stablehlo", log=lambda _: None)
  assert set(result.differences) == {"image_tower", "text_tower"}
  assert max(result.differences.values()) <= 1e-5
