"""python -m vit_jax.zeroshot end to end on random-weight models saved to disk: a LiT model
with a BERT vocabulary beside it (softmax) and a SigLIP one with a sentencepiece model
(sigmoid), on scikit-learn's sample photos; --json records; one-line mistakes."""

import json
import subprocess
import sys

import jax
import numpy as np
import pytest
from absl import app, flags
from PIL import Image

import two_tower_helpers
from vit_jax import zeroshot
from vit_jax.data import text_tokens
from vit_jax.data.grain_stack import np_preprocess
from vit_jax.families.two_tower import npz_file
from vit_jax.families.two_tower import text_tower
from vit_jax.families.two_tower import model as two_tower
from vit_jax.families.two_tower import scoring
from vit_jax.families.vit import model as vit
from vit_jax.models import memory_fit
from vit_jax.training.scores import retrieval

CLASSES = ["china", "flower", "cat"]


@pytest.fixture(name="photos", scope="module")
def fixture_photos(tmp_path_factory):
  datasets = pytest.importorskip("sklearn.datasets")
  folder = tmp_path_factory.mktemp("photos")
  paths = []
  for name, pixels in zip(("china", "flower"), datasets.load_sample_images().images):
    paths.append(str(folder / f"{name}.jpg"))
    Image.fromarray(pixels).save(paths[-1])
  return paths


@pytest.fixture(name="lit", scope="module")
def fixture_lit(tmp_path_factory):
  return two_tower_helpers.save_tiny_lit(tmp_path_factory.mktemp("lit"), CLASSES)


def _embed(model, params, files):
  images = np.stack([np_preprocess.eval_resize(np.asarray(Image.open(p).convert("RGB")), 32)
                     for p in files])
  return jax.jit(lambda p, x: model.apply(p, x, method=model.embed_images))(params, images)


@pytest.fixture(name="siglip2", scope="module")
def fixture_siglip2(tmp_path_factory):
  """(a tiny SigLIP 2 shaped .npz, its sentencepiece model)."""
  sentencepiece = pytest.importorskip("sentencepiece")
  folder = tmp_path_factory.mktemp("siglip2")
  (folder / "corpus.txt").write_text("\n".join(["a photo of a cat", "a flower", "china"] * 30))
  sentencepiece.SentencePieceTrainer.Train(
      input=str(folder / "corpus.txt"), model_prefix=str(folder / "s"), vocab_size=18,
      pad_id=0, eos_id=1, unk_id=2, bos_id=-1, minloglevel=2)
  model = two_tower_helpers.tiny_siglip(vocab_size=18)
  npz_file.save_two_tower(two_tower_helpers.random_params(model, 8), str(folder / "m.npz"))
  return str(folder / "m.npz"), str(folder / "s.model")


@pytest.fixture(name="run")
def fixture_run(monkeypatch, capsys):
  def run(*argv):
    values = flags.FlagValues()
    zeroshot.define_flags(values)
    monkeypatch.setattr(zeroshot, "FLAGS", values)
    try:
      zeroshot.main(values(["zeroshot", *argv]), values)
      code = 0
    except SystemExit as e:
      code = e.code
    out, err = capsys.readouterr()
    return code, out, err
  return run


def test_lit_softmax_json_matches_the_model(run, lit, photos, tmp_path):
  path, model, params = lit
  out_json = str(tmp_path / "scores.json")
  code, out, err = run(f"--checkpoint={path}", "--classes=" + ",".join(CLASSES),
                       "--templates=a photo of {}|{}", f"--json={out_json}", *photos)
  assert code == 0, err
  assert "softmax" in out
  records = json.loads((tmp_path / "scores.json").read_text(encoding="utf-8"))
  assert [r["path"] for r in records] == photos
  scores = np.array([r["scores"] for r in records])
  np.testing.assert_allclose(scores.sum(1), 1, rtol=1e-5)
  assert records[0]["top_k"][0]["score"] == max(records[0]["scores"])
  # The same numbers by hand: tokens, template-mean class embeddings, images at 32 px.
  tokens = text_tokens.BertTokenizer(path[:-4] + ".txt", 16)(
      [t.format(c) for c in CLASSES for t in ("a photo of {}", "{}")])
  ztxt = scoring.embed_texts(model, params["params"], tokens).reshape(3, 2, -1).mean(1)
  images = np.stack([np_preprocess.eval_resize(np.asarray(Image.open(p)), 32) for p in photos])
  zimg = jax.jit(lambda p, x: model.apply(p, x, method=model.embed_images))(params, images)
  logits = model.apply(params, zimg, two_tower.normalize(ztxt), method=model.logits)
  np.testing.assert_allclose(scores, two_tower.scores(logits, "lit"), rtol=1e-4, atol=1e-6)


def test_siglip_sigmoid_with_sentencepiece(run, photos, tmp_path):
  sentencepiece = pytest.importorskip("sentencepiece")
  corpus = tmp_path / "corpus.txt"
  corpus.write_text("\n".join(["a photo of a cat", "a flower", "china"] * 30))
  sentencepiece.SentencePieceTrainer.Train(input=str(corpus), model_prefix=str(tmp_path / "s"),
                                           vocab_size=18, pad_id=0, eos_id=1, unk_id=2,
                                           bos_id=-1, minloglevel=2)
  img = vit.VisionTransformer(num_classes=0, patch_size=8, hidden_size=16, mlp_dim=32,
                              num_heads=2, num_layers=1, classifier="map")
  txt = text_tower.TextTransformer(16, 16, 1, 32, 2, vocab_size=18, max_len=8)
  model = two_tower.TwoTower(img, txt, bias_init=-10.0, temperature_init=10.0)
  npz_file.save_two_tower(two_tower_helpers.random_params(model, 8),
                          str(tmp_path / "siglip.npz"))
  (tmp_path / "classes.txt").write_text("\n".join(CLASSES) + "\n")
  code, out, err = run(f"--checkpoint={tmp_path / 'siglip.npz'}",
                       f"--classes=@{tmp_path / 'classes.txt'}",
                       f"--tokenizer={tmp_path / 's.model'}", "--json=-", *photos)
  assert code == 0, err
  records = json.loads(out)
  assert "sigmoid" in err and len(records[0]["scores"]) == 3
  assert all(0 < s < 1 for r in records for s in r["scores"])


def test_mistakes_are_one_line(run, lit, photos):
  path = lit[0]
  with pytest.raises(app.UsageError, match="empty class name"):
    run(f"--checkpoint={path}", "--classes=cat,,dog", *photos)
  with pytest.raises(app.UsageError, match="exactly one"):
    run(f"--checkpoint={path}", "--classes=cat", "--templates=a photo", *photos)
  code, _, err = run(f"--checkpoint={path}", "--classes=cat", "missing.png")
  assert code == 1 and "missing.png" in err and len(err.strip().splitlines()) == 1


def test_folder_accuracy_and_caption_retrieval(run, lit, photos, tmp_path):
  path, model, params = lit
  for name, photo in zip(("china", "flower"), photos):
    (tmp_path / "folder" / name).mkdir(parents=True)
    Image.open(photo).save(tmp_path / "folder" / name / "a.png")
    Image.open(photo).transpose(Image.FLIP_LEFT_RIGHT).save(tmp_path / "folder" / name / "b.png")
  code, out, err = run(f"--checkpoint={path}", f"--folder={tmp_path / 'folder'}",
                       "--templates=class_name_only", f"--json={tmp_path / 'top1.json'}")
  assert code == 0, err
  metrics = json.loads((tmp_path / "top1.json").read_text(encoding="utf-8"))
  assert metrics["images"] == 4 and metrics["classes"] == ["china", "flower"]
  assert "wrote the zero-shot accuracy" in out
  files = [str(tmp_path / "folder" / c / f)
           for c in ("china", "flower") for f in ("a.png", "b.png")]
  tokenize = text_tokens.BertTokenizer(path[:-4] + ".txt", 16)
  zcls = scoring.class_embeddings(model, params["params"], tokenize, ["china", "flower"],
                                  ["{}"])
  zimg = _embed(model, params, files)
  logits = model.apply(params, zimg, zcls, method=model.logits)
  assert metrics["top1"] == retrieval.top1(np.asarray(logits), [0, 0, 1, 1])
  captions = tmp_path / "captions.tsv"
  captions.write_text(f"{photos[0]}\ta photo of china\n{photos[0]}\tchina\n"
                      f"{photos[1]}\ta photo of a flower\n")
  code, out, err = run(f"--checkpoint={path}", f"--captions={captions}", "--json=-")
  assert code == 0, err
  recall = json.loads(out)
  assert recall.pop("written_by") == "vit_jax.zeroshot"  # its own to replace on a rerun
  ztxt = scoring.embed_texts(model, params["params"], tokenize(
      ["a photo of china", "china", "a photo of a flower"]))
  assert recall == retrieval.recall_at_k(_embed(model, params, photos), ztxt, [0, 0, 1])


def test_images_folder_and_captions_exclude_each_other(run, lit, photos, tmp_path):
  with pytest.raises(app.UsageError, match="one of them"):
    run(f"--checkpoint={lit[0]}", f"--folder={tmp_path}", *photos)
  with pytest.raises(app.UsageError, match="--classes"):
    run(f"--checkpoint={lit[0]}", *photos)


@pytest.mark.long  # a real process: start first (conftest)
def test_runs_without_tensorflow(lit, photos, tmp_path):
  from conftest import REPO  # pylint: disable=import-outside-toplevel
  from helpers import subprocess_env  # pylint: disable=import-outside-toplevel
  done = subprocess.run(
      [sys.executable, str(REPO / "tests" / "without_tensorflow.py"), "vit_jax.zeroshot",
       f"--checkpoint={lit[0]}", "--classes=china,flower", "--templates=clip_best",
       f"--json={tmp_path / 'out.json'}", *photos],
      env=subprocess_env(), cwd=tmp_path, capture_output=True, text=True, timeout=300)
  assert done.returncode == 0, done.stderr[-3000:]
  assert done.stdout.strip().endswith("tensorflow imported: False")
  assert len(json.loads((tmp_path / "out.json").read_text())) == 2


def test_naflex_reading_with_max_patches(run, photos, siglip2, tmp_path):
  """--max_patches: each image at its own aspect ratio (the photos, 427 x 640: 3 x 5 of 8 px
  patches within 16), padded in one batch; a 32 x 32 image, its full 4 x 4 grid the table's
  own, scores as the fixed-size reading does."""
  path, tokenizer = siglip2
  square = str(tmp_path / "square.png")
  Image.fromarray(np.asarray(Image.open(photos[0]).convert("RGB").resize((32, 32)))).save(square)
  common = [f"--checkpoint={path}", "--classes=" + ",".join(CLASSES),
            f"--tokenizer={tokenizer}", "--json=-", "--batch_size=4"]
  code, out, err = run(*common, "--max_patches=16", square, *photos)
  assert code == 0, err
  naflex = json.loads(out)
  code, out, err = run(*common, square)
  assert code == 0, err
  np.testing.assert_allclose(naflex[0]["scores"], json.loads(out)[0]["scores"], rtol=1e-4,
                             atol=1e-6)
  assert len(naflex) == 3 and all(0 < s < 1 for r in naflex for s in r["scores"])
  with pytest.raises(app.UsageError, match="leave --image_size out"):
    run(*common, "--max_patches=16", "--image_size=32", square)


def test_a_budget_past_memory_is_one_line_and_a_batch_holds_only_its_images(
    run, photos, siglip2, monkeypatch):
  """One image at --max_patches=N is one sequence of N patches (not --batch_size of them);
  a budget whose one image cannot fit memory is refused before anything is allocated."""
  path, tokenizer = siglip2
  common = [f"--checkpoint={path}", "--classes=cat,flower", f"--tokenizer={tokenizer}",
            "--templates=class_name_only"]
  asked = []
  fit = memory_fit.largest_batch
  monkeypatch.setattr(memory_fit, "largest_batch", lambda compile_at, batch, bound, **kw: (
      asked.append((batch, bound(1))), fit(compile_at, batch, bound, **kw))[1])
  code, out, err = run(*common, "--max_patches=40", photos[0])
  assert code == 0, err
  assert "images at their aspect ratio in 40 patches" in out
  assert asked == [(1, 2 * 40 * 40 * 4)]  # one image, 2 heads x 40 x 40 float32 scores
  code, _, err = run(*common, "--max_patches=1000000000", photos[0])
  assert code == 1 and "fewer patches (a smaller --max_patches" in err
  assert len(err.strip().splitlines()) == 1 and "GiB free" in err


def test_inputs_are_checked_before_the_model_loads(run, photos, tmp_path):
  """Mistakes in the classes, the folder or the captions are told before the (slow) load:
  here there is no checkpoint to load at all."""
  captions = tmp_path / "captions.tsv"
  captions.write_text(f"{photos[0]}\ta photo\n{photos[1]}\t  \n")
  checkpoint = f"--checkpoint={tmp_path / 'absent.npz'}"
  for args, message in (
      (["--classes=c++,c#,c", photos[0]],
       "--classes: 'c++', 'c#', 'c' all read 'c' after the canonical form"),
      (["--classes=Cat,cat,CAT!", photos[0]], "'Cat', 'cat', 'CAT!' all read 'cat'"),
      (["--classes=cat,!!!", photos[0]], "--classes: '!!!' read as nothing"),
      ([f"--folder={tmp_path / 'nowhere'}"], "nowhere is no folder of class folders"),
      ([f"--captions={captions}"], f"{captions}:2 has a blank caption")):
    code, _, err = run(checkpoint, *args)
    assert code == 1 and message in err and len(err.strip().splitlines()) == 1, err
  code, _, err = run(checkpoint, "--classes=c++,c#", photos[0])
  assert "--nocanonicalize" in err
  code, _, err = run(checkpoint, "--classes=c++,c#", "--nocanonicalize", photos[0])
  assert "absent.npz" in err  # kept apart as typed: on to the load


def test_json_reruns_replace_their_own_file_only(run, lit, photos, tmp_path):
  out = tmp_path / "out.json"
  for args in ((photos[0],), (f"--folder={tmp_path / 'folder'}",)):
    (tmp_path / "folder" / "china").mkdir(parents=True, exist_ok=True)
    Image.open(photos[0]).save(tmp_path / "folder" / "china" / "a.png")
    for _ in range(2):
      code, _, err = run(f"--checkpoint={lit[0]}", "--classes=china", f"--json={out}",
                         "--templates=class_name_only", *args)
      assert code == 0, err
  assert json.loads(out.read_text())["written_by"] == "vit_jax.zeroshot"
  out.write_text(json.dumps([{"path": photos[0]}]))
  code, _, err = run(f"--checkpoint={lit[0]}", "--classes=china", f"--json={out}", photos[0])
  assert code == 1 and "vit_jax.zeroshot did not write it" in err
