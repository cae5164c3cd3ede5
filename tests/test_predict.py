"""vit_jax.predict: classify() against the model run by hand, labels, and the command: one
run as a real process (the command line; tests/fork_server.py), the others in this process
through the command's flags and vit_jax.base.cli's endings (helpers.run_in_process)."""

import json
import os

import jax
import numpy as np
import pytest
from PIL import Image

import fork_server
import two_tower_helpers
from conftest import REPO, RELEASED_FIXTURES, random_params, tiny_model
from helpers import closed_port, run_in_process, subprocess_env
from hub_server import HubServer
from vit_jax import load_npz, predict, save_npz
from vit_jax.checkpoints import released
from vit_jax.data import image_files, text_tokens
from vit_jax.families.two_tower import npz_file
from vit_jax.families.vit import naflex_model
from vit_jax.families.two_tower import scoring
from vit_jax.training import lora_adapters


@pytest.fixture
def images(tmp_path):
  """A PNG, a JPEG, a grayscale and an RGBA image of different sizes, and a corrupt one."""
  rng = np.random.RandomState(0)
  paths = {"rgb.png": (50, 80, 3), "photo.jpg": (120, 90, 3), "gray.png": (40, 40),
           "alpha.png": (30, 60, 4)}
  for name, shape in paths.items():
    Image.fromarray(rng.randint(0, 256, shape, np.uint8)).save(tmp_path / name)
  (tmp_path / "corrupt.jpg").write_bytes(b"\xff\xd8 not really a jpeg")
  return {name.split(".")[0]: str(tmp_path / name) for name in [*paths, "corrupt.jpg"]}


def test_classify_matches_the_model_and_ignores_batch_padding(images):
  module = tiny_model(num_classes=7)
  params = random_params(module, 16)  # numpy draws: nothing compiled
  paths = [images["rgb"], images["photo"], images["gray"]]
  batch = np.stack([image_files.load_image(p, 16) for p in paths])
  apply = jax.jit(module.apply, static_argnames="train")  # one program, not op by op
  probs = np.asarray(jax.nn.softmax(apply({"params": params}, batch, train=False)))

  for batch_size, top_k in ((2, 3), (32, 50)):  # 2: the last batch is padded; 50 > K
    predictions = predict.classify(module, params, paths, top_k=top_k, batch_size=batch_size)
    assert len(predictions) == 3
    for prediction, expected in zip(predictions, probs):
      k = min(top_k, 7)
      assert [index for index, _ in prediction] == list(np.argsort(-expected)[:k])
      np.testing.assert_allclose([p for _, p in prediction], np.sort(expected)[::-1][:k],
                                 rtol=1e-5)


def test_images_are_preprocessed_like_evaluation(images):
  image = image_files.load_image(images["alpha"], 24)
  assert image.shape == (24, 24, 3) and image.dtype == np.float32
  assert -1 <= image.min() < image.max() <= 1
  with pytest.raises(image_files.ImageError, match=f"cannot read image {images['corrupt']}: "):
    image_files.load_image(images["corrupt"], 24)


def test_labels_file_and_imagenet_names_fetched_once(tmp_path, monkeypatch, caplog):
  monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
  labels = tmp_path / "labels.txt"
  labels.write_text("".join(f"name {i}\n" for i in range(1000)))
  assert predict.class_names(1000, str(labels))[999] == "name 999"
  with pytest.raises(ValueError, match="has 1000 names but the model has 10 classes"):
    predict.class_names(10, str(labels))
  assert predict.class_names(10) is None  # not ImageNet: class indices

  server = HubServer()  # storage.googleapis.com's stand-in, not serving yet
  try:
    monkeypatch.setenv(released.EMULATOR_ENV, f"127.0.0.1:{closed_port()}")
    assert predict.class_names(1000) is None
    assert "no ImageNet class names" in caplog.text and "cannot reach" in caplog.text
    monkeypatch.setenv(released.EMULATOR_ENV, server.url)
    server.files["/bit_models/ilsvrc2012_wordnet_lemmas.txt"] = labels.read_bytes()
    assert predict.class_names(1000)[0] == "name 0"
    assert predict.class_names(1000)[0] == "name 0"
    assert [request for request in server.requests if request.startswith("GET")] == [
        "GET /bit_models/ilsvrc2012_wordnet_lemmas.txt"]  # once, then read from the cache
  finally:
    server.close()
  assert os.listdir(tmp_path / "cache" / "vit_jax") == ["ilsvrc2012_wordnet_lemmas.txt"]


def run_predict(folder, *args):
  """`python -m vit_jax.predict ARGS` as a real process (forked from tests/fork_server.py,
  which imported TensorFlow once), its stdout and stderr apart, in files under `folder`.
  Its first lines (a fresh start's): tests/base/test_cli.py."""
  return fork_server.run(["vit_jax.predict", *args], subprocess_env(), REPO, folder, 120)


def predict_command(*args):
  """The same command in this process."""
  return run_in_process(predict, *args)


def parse(stdout):
  """{image: [(probability, index, name or ''), ...]} from the command's output."""
  results = {}
  for line in stdout.splitlines():
    if not line.startswith(" "):
      image = line.rstrip(":")
      results[image] = []
    else:
      prob, index, *name = line.split(maxsplit=2)  # no name without labels
      results[image].append((float(prob), int(index), "".join(name)))
  return results


def test_predict_command_with_released_checkpoint_and_labels(images, tmp_path):
  labels = tmp_path / "labels.txt"
  labels.write_text("".join(f"class-{i}\n" for i in range(10)))
  paths = [images["rgb"], images["photo"], images["gray"]]
  done = run_predict(tmp_path, f"--checkpoint={RELEASED_FIXTURES / 'vit-ti16.npz'}",
                     f"--labels={labels}", "--batch_size=2", *paths)
  assert done.returncode == 0, done.stderr
  results = parse(done.stdout)
  assert list(results) == paths
  for top5 in results.values():
    probs = [p for p, _, _ in top5]
    assert len(top5) == 5 and probs == sorted(probs, reverse=True)
    assert 0 < sum(probs) <= 1 + 1e-3
    assert all(name == f"class-{index}" for _, index, name in top5)


def test_a_folder_trained_model_predicts_names_and_a_featurizer_refuses(images, tmp_path):
  names = ["café", "猫 cat", "🐶", "dog", "--flag", "emu", "fox"]  # saved by a folder run
  save_npz(random_params(tiny_model(num_classes=7), 16), tmp_path / "named.npz",
           class_names=names)
  done = predict_command(f"--checkpoint={tmp_path / 'named.npz'}", "--top_k=7", images["rgb"])
  assert done.returncode == 0, done.stderr
  assert sorted(name for _, _, name in parse(done.stdout)[images["rgb"]]) == sorted(names)
  assert all(name == names[index] for _, index, name in parse(done.stdout)[images["rgb"]])

  params = random_params(tiny_model(num_classes=7), 16)
  params["head"]["kernel"] = np.zeros_like(params["head"]["kernel"])  # a featurizer's head
  save_npz(params, tmp_path / "zero_head.npz")
  line = one_error_line(predict_command(f"--checkpoint={tmp_path / 'zero_head.npz'}",
                                        images["rgb"]))
  assert line.startswith(f"error: {tmp_path / 'zero_head.npz'} has no trained classification "
                         "head (an all-zero head, as masked-patch-prediction pre-training "
                         "exports)")


def test_predict_command_errors_are_one_line(images, tmp_path):
  missing = tmp_path / "nope.npz"
  failed = predict_command(f"--checkpoint={missing}", images["rgb"])
  assert failed.returncode == 1 and failed.stdout == ""
  error_lines = [l for l in failed.stderr.splitlines() if l.startswith("error:")]
  assert len(error_lines) == 1 and str(missing) in error_lines[0]
  assert "Traceback" not in failed.stderr

  failed = predict_command(f"--checkpoint={RELEASED_FIXTURES / 'vit-ti16.npz'}",
                           images["rgb"], images["corrupt"])
  assert failed.returncode == 1 and "Traceback" not in failed.stderr
  assert failed.stderr.splitlines()[-1].startswith(f"error: cannot read image {images['corrupt']}")


def test_a_binary_labels_file_is_one_line(tmp_path):
  labels = tmp_path / "labels.bin"
  labels.write_bytes(b"\x89PNG\r\n\x1a\n\xff\xfe")
  with pytest.raises(ValueError, match=f"--labels={labels} is not UTF-8 text \\(byte 0: invalid "
                     "start byte\\): pass a text file with one class name per line"):
    predict.read_labels(str(labels))


def test_a_labels_file_saved_with_a_byte_order_mark_reads_its_first_name(tmp_path):
  labels = tmp_path / "labels.txt"
  labels.write_bytes("cat\ndog\n".encode("utf-8-sig"))  # Notepad's and Excel's UTF-8
  assert predict.read_labels(str(labels)) == ["cat", "dog"]


def one_error_line(failed):
  """The command failed with exactly one `error:` line and no traceback; that line."""
  assert failed.returncode == 1 and failed.stdout == "", failed.stderr
  assert "Traceback" not in failed.stderr
  errors = [line for line in failed.stderr.splitlines() if line.startswith("error:")]
  assert len(errors) == 1, failed.stderr
  return errors[0]


@pytest.fixture
def tiny_checkpoint(tmp_path):
  """save(arrays_edit) -> path of a tiny 7-class checkpoint (16 px) after arrays_edit."""
  def save(edit=lambda arrays: None):
    path = tmp_path / "tiny.npz"
    save_npz(random_params(tiny_model(num_classes=7), 16), path)
    arrays = dict(np.load(path))
    edit(arrays)
    np.savez(path, **arrays)
    return path
  return save


@pytest.mark.parametrize("value,name", [(np.nan, "NaN"), (np.inf, "Inf")])
def test_predict_command_refuses_nonfinite_weights(images, tiny_checkpoint, value, name):
  path = tiny_checkpoint(lambda arrays: arrays["head/bias"].__setitem__(3, value))
  line = one_error_line(predict_command(f"--checkpoint={path}", images["rgb"]))
  assert line.startswith(f"error: {path} has NaN/Inf weights in 1 of 40 arrays: head/bias "
                         f"(1 {name}); ")
  assert line.endswith("(commands: --allow_nonfinite; training: "
                       "--config.allow_nonfinite_pretrained=True)")


def test_predict_command_loads_nonfinite_weights_when_allowed(images, tiny_checkpoint):
  path = tiny_checkpoint(lambda arrays: arrays["head/bias"].__setitem__(3, np.nan))
  done = predict_command(f"--checkpoint={path}", "--allow_nonfinite", images["rgb"])
  assert done.returncode == 0, done.stderr
  top5 = parse(done.stdout)[images["rgb"]]
  assert len(top5) == 5 and all(np.isnan(prob) for prob, _, _ in top5)


@pytest.mark.parametrize("size,message", [
    (8, "image size 8 is smaller than the model's 16 px patches (no token): use 16 or a larger "
        "multiple of 16"),
    (20000, "image size 20000 gives 1250x1250 = 1,562,500 tokens, over the limit of 16,384 "
            "(attention memory grows with their square): use at most 2048 px")])
def test_predict_command_checks_the_image_size_against_the_model(images, size, message):
  """The two sizes reported broken (a reshape error, an OOM reported as an unreadable image);
  non-multiples of the stride: test_visualize and test_npz, same hub.load_for_inference."""
  failed = predict_command(f"--checkpoint={RELEASED_FIXTURES / 'vit-ti16.npz'}",
                           f"--image_size={size}", images["rgb"])
  assert one_error_line(failed) == f"error: {message}"


def test_predict_command_directory_and_malformed_checkpoints(images, tiny_checkpoint, tmp_path):
  path = tiny_checkpoint(lambda arrays: arrays.__setitem__("embedding/kernel", np.float32(0)))
  line = one_error_line(predict_command(f"--checkpoint={path}", images["rgb"]))
  assert line == (f"error: {path} is not a usable ViT checkpoint: embedding/kernel has shape (), "
                  "expected a 4-D (patch, patch, channels, hidden) kernel (the file is damaged "
                  "or was edited: save it again from the model)")
  line = one_error_line(predict_command(f"--checkpoint={tmp_path}", images["rgb"]))
  assert line == (f"error: {tmp_path} is a directory, not an .npz checkpoint: pass one of its "
                  f".npz files: {path}")
  adapters = tmp_path / "adapters.npz"  # a LoRA run's other file, not a model
  np.savez(adapters, **{**np.load(path), lora_adapters.SETTINGS: np.array("{}")})
  line = one_error_line(predict_command(f"--checkpoint={adapters}", images["rgb"]))
  assert line == (f"error: {adapters} is a LoRA run's adapters file, not a model: pass that "
                  "run's params.npz (the merged model), or rebuild it with python -m "
                  f"vit_jax.lora BASE {adapters} OUT")


def test_predict_json_for_scripts_single_and_multi_label(images, tmp_path, monkeypatch):
  """--json: one record per image; a multi-label head (flag saved with its names) gets
  every class's sigmoid score and the names at or over --threshold; a rerun replaces its
  own file, no other is clobbered."""
  module = tiny_model(num_classes=7)
  params = random_params(module, 16)
  names = ["a", "b", "c", "d", "e", "f", "g"]
  paths = [images["rgb"], images["gray"], images["photo"]]
  logits = np.asarray(module.apply({"params": params}, np.stack(
      [image_files.load_image(p, 16) for p in paths]), train=False), np.float64)
  for multi_label in (False, True):
    checkpoint, out = tmp_path / f"m{multi_label}.npz", tmp_path / f"m{multi_label}.json"
    save_npz(params, checkpoint, class_names=names, multi_label=multi_label)
    done = predict_command(f"--checkpoint={checkpoint}", f"--json={out}", "--top_k=3",
                           "--threshold=0.4", "--batch_size=2", *paths)
    assert done.returncode == 0, done.stderr
    records = json.loads(out.read_text())
    assert [r["path"] for r in records] == paths
    probs = (1 / (1 + np.exp(-logits)) if multi_label
             else np.exp(logits) / np.exp(logits).sum(-1, keepdims=True))
    for record, expected in zip(records, probs):
      top = np.argsort(-expected)[:3]
      assert [t["class"] for t in record["top_k"]] == top.tolist()
      assert [t["name"] for t in record["top_k"]] == [names[i] for i in top]
      np.testing.assert_allclose([t["probability"] for t in record["top_k"]], expected[top],
                                 rtol=1e-4)
      assert ("scores" in record) == ("labels" in record) == multi_label
      if multi_label:
        np.testing.assert_allclose(record["scores"], expected, rtol=1e-4)
        assert record["labels"] == [names[i] for i in np.flatnonzero(expected >= 0.4)]
  done = predict_command(f"--checkpoint={checkpoint}", f"--json={out}", "--top_k=3",
                         "--threshold=0.4", "--batch_size=2", *paths)
  assert done.returncode == 0, done.stderr  # a rerun replaces its own list of records
  notes = tmp_path / "notes.json"
  notes.write_text(json.dumps([{"path": "mine"}]))
  failed = predict_command(f"--checkpoint={checkpoint}", f"--json={notes}", images["rgb"])
  assert "already exists and vit_jax.predict did not write it" in one_error_line(failed)
  monkeypatch.chdir(tmp_path)  # '-' is standard output, never a file named '-'
  done = predict_command(f"--checkpoint={checkpoint}", "--json=-", "--top_k=3",
                         "--threshold=0.4", "--batch_size=2", *paths)
  assert done.returncode == 0, done.stderr
  assert json.loads(done.stdout) == json.loads(out.read_text()) and not (tmp_path / "-").exists()
  assert "wrote 3 predictions (sigmoid scores) to standard output" in done.stderr
  for value in ("nan", "inf", "-inf"):  # absl's bounds let nan through
    failed = predict_command(f"--checkpoint={checkpoint}", f"--threshold={value}", paths[0])
    assert failed.returncode == 2 and failed.stderr.count("\n") == 1, failed.stderr
    assert f"flag --threshold={value}: '{value}' is not a finite number" in failed.stderr


def test_predict_command_runs_any_size_as_the_load_time_resize_does(images, tiny_checkpoint):
  """--image_size=HxW (non-square) on a 16 px checkpoint: the model resizes its position
  embedding; the probabilities are those of the checkpoint loaded at that size."""
  path = tiny_checkpoint()
  done = predict_command(f"--checkpoint={path}", "--image_size=16x24", "--top_k=7",
                         images["rgb"])
  assert done.returncode == 0, done.stderr
  module, params = load_npz(path, image_size=(16, 24))
  expected = predict.classify(module, params, [images["rgb"]], image_size=(16, 24), top_k=7)[0]
  assert done.stdout == predict.format_prediction(images["rgb"], expected, None) + "\n"
  failed = predict_command(f"--checkpoint={path}", "--image_size=16x25", images["rgb"])
  assert one_error_line(failed) == ("error: image size 16x25 is not a multiple of the model's "
                                    "stride 4 px: use 16x24 or 16x28")


def test_classes_score_a_two_tower_model_zero_shot(tmp_path, images):
  """--classes through a LiT model's towers: the scores zeroshot's library gives (softmax
  over the classes); a classifier with --classes, a two-tower file without, refused."""
  path, model, params = two_tower_helpers.save_tiny_lit(tmp_path, ("cat", "dog"))
  paths = [images["rgb"], images["photo"]]
  done = predict_command(f"--checkpoint={path}", "--classes=cat,dog", "--templates={}",
                         "--json=-", *paths)
  assert done.returncode == 0, done.stderr
  records = json.loads(done.stdout)
  zcls = scoring.class_embeddings(model, params["params"], text_tokens.BertTokenizer(
      path[:-4] + ".txt", 16), ["cat", "dog"], ["{}"])
  zimg = scoring.embed_image_files(model, params["params"], paths, 32, 2)
  expected = scoring.read_scores(model, params["params"], zimg, zcls)
  for record, row in zip(records, expected):
    assert [c["name"] for c in record["top_k"]] == [["cat", "dog"][i] for i in np.argsort(-row)]
    np.testing.assert_allclose([c["probability"] for c in record["top_k"]], np.sort(row)[::-1],
                               rtol=1e-5)
  classifier = str(tmp_path / "vit.npz")
  save_npz(random_params(tiny_model(num_classes=3), 16), classifier)
  for args, message in (([f"--checkpoint={classifier}", "--classes=cat"], "drop --classes"),
                        ([f"--checkpoint={path}"], "--classes")):
    done = predict_command(*args, images["rgb"])
    assert done.returncode == 1 and message in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_classes_of_a_siglip_model_are_sigmoid_scores(tmp_path, images):
  """SigLIP: each class's own sigmoid, written as predict writes a multi-label head's."""
  model = two_tower_helpers.tiny_siglip()
  params = two_tower_helpers.random_params(model, 8)
  path = str(tmp_path / "siglip.npz")
  npz_file.save_two_tower(params, path)
  (tmp_path / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "cat", "dog"]))
  done = predict_command(f"--checkpoint={path}", "--classes=cat,dog,bird", "--templates={}",
                         f"--tokenizer={tmp_path / 'vocab.txt'}", "--json=-", images["rgb"])
  assert done.returncode == 0, done.stderr
  (record,) = json.loads(done.stdout)
  zcls = scoring.class_embeddings(model, params["params"], text_tokens.BertTokenizer(
      str(tmp_path / "vocab.txt"), 8), ["cat", "dog", "bird"], ["{}"])
  zimg = scoring.embed_image_files(model, params["params"], [images["rgb"]], 32, 1)
  logits = np.asarray(model.apply(params, zimg, zcls, method=model.logits))
  np.testing.assert_allclose(record["scores"], 1 / (1 + np.exp(-logits[0])), rtol=1e-5)
  assert "sigmoid scores" in done.stderr


@pytest.fixture(name="naflex_file")
def fixture_naflex_file(tmp_path):
  """A tiny MAP-pooled 3-class ViT (4 px patches, a 4 x 4 table) saved as a run trained at
  config.pp.max_patches=12 saves it: the budget recorded in the file."""
  path = tmp_path / "naflex.npz"
  save_npz(random_params(tiny_model(num_classes=3, classifier="map"), 16), path, max_patches=12)
  return path


def test_a_naflex_file_is_read_at_its_recorded_budget_unless_asked_otherwise(images,
                                                                             naflex_file):
  """No --max_patches: NaFlex at the file's 12 patches (the same as asking for them);
  another budget, or 0 for square images, when asked; each run says which reading."""
  paths = [images["rgb"], images["photo"]]
  module, params = load_npz(naflex_file)
  runs = {flag: predict_command(f"--checkpoint={naflex_file}", "--top_k=3", *flag, *paths)
          for flag in ((), ("--max_patches=12",), ("--max_patches=5",), ("--max_patches=0",))}
  assert all(done.returncode == 0 for done in runs.values()), runs
  said = {flag: done.stderr.strip().splitlines()[-1] for flag, done in runs.items()}
  assert said[()] == f"{naflex_file}: NaFlex, 12 patches, from the file"
  assert runs[()].stdout == runs[("--max_patches=12",)].stdout
  (expected,) = predict.score_batches(module, params, paths, max_patches=12)
  assert parse(runs[()].stdout) == parse("\n".join(
      predict.format_prediction(path, top, None)
      for path, top in zip(paths, predict.top_classes(expected, 3))))
  assert said[("--max_patches=5",)] == (f"{naflex_file}: NaFlex, 5 patches, as asked (the "
                                        "file records 12)")
  assert runs[("--max_patches=5",)].stdout != runs[()].stdout
  assert said[("--max_patches=0",)] == (f"{naflex_file}: square images, 16x16 px (asked for; "
                                        "the file records NaFlex at 12 patches)")
  (square,) = predict.score_batches(module, params, paths)
  assert parse(runs[("--max_patches=0",)].stdout) == parse("\n".join(
      predict.format_prediction(path, top, None)
      for path, top in zip(paths, predict.top_classes(square, 3))))
  failed = predict_command(f"--checkpoint={naflex_file}", "--image_size=32", images["rgb"])
  assert one_error_line(failed) == (
      f"error: {naflex_file} is read as NaFlex, 12 patches, from the file, and --image_size "
      "asks for square images: add --max_patches=0 to read it so, or leave --image_size out")


def test_a_budget_past_the_device_memory_is_one_line(images, naflex_file):
  failed = predict_command(f"--checkpoint={naflex_file}", "--max_patches=1000000000",
                           images["rgb"], images["gray"])
  assert one_error_line(failed).startswith(
      "error: --max_patches=1000000000: a batch of 2 at that budget needs ")
  assert failed.stderr.strip().endswith(
      "pass a smaller budget (released NaFlex models read 256 to 1024), or a smaller "
      "--batch_size")
  module, _ = load_npz(naflex_file)
  naflex_model.check_budget_fits(module, 256, 32, memory_bytes=2**30)  # 0.05 GiB: fits
  with pytest.raises(ValueError, match=r"--max_patches=4096: a batch of 32 at that budget "
                     r"needs 4\.0 GiB .* this device has 2\.0 GiB"):  # 2 heads of 4096^2
    naflex_model.check_budget_fits(module, 4096, 32, memory_bytes=2 * 2**30)
