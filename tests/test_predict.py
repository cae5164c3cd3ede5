"""vit_jax.predict: classify() against the model run by hand, labels, and the command."""

import os
import subprocess
import sys
import urllib.error

import jax
import numpy as np
import pytest
from PIL import Image

from conftest import REPO, RELEASED_FIXTURES, init_params, tiny_model
from test_released import serve_from
from vit_jax import predict


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
  params = init_params(module)
  paths = [images["rgb"], images["photo"], images["gray"]]
  batch = np.stack([predict.load_image(p, 16) for p in paths])
  probs = np.asarray(jax.nn.softmax(module.apply({"params": params}, batch, train=False)))

  for batch_size, top_k in ((2, 3), (32, 50)):  # 2: the last batch is padded; 50 > K
    predictions = predict.classify(module, params, paths, top_k=top_k, batch_size=batch_size)
    assert len(predictions) == 3
    for prediction, expected in zip(predictions, probs):
      k = min(top_k, 7)
      assert [index for index, _ in prediction] == list(np.argsort(-expected)[:k])
      np.testing.assert_allclose([p for _, p in prediction], np.sort(expected)[::-1][:k],
                                 rtol=1e-5)


def test_images_are_preprocessed_like_evaluation(images):
  image = predict.load_image(images["alpha"], 24)
  assert image.shape == (24, 24, 3) and image.dtype == np.float32
  assert -1 <= image.min() < image.max() <= 1
  with pytest.raises(predict.ImageError, match=f"cannot read image {images['corrupt']}: "):
    predict.load_image(images["corrupt"], 24)


def test_labels_file_and_imagenet_names_fetched_once(tmp_path, monkeypatch, caplog):
  monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
  labels = tmp_path / "labels.txt"
  labels.write_text("".join(f"name {i}\n" for i in range(1000)))
  assert predict.class_names(1000, str(labels))[999] == "name 999"
  with pytest.raises(ValueError, match="has 1000 names but the model has 10 classes"):
    predict.class_names(10, str(labels))
  assert predict.class_names(10) is None  # not ImageNet: class indices

  def offline(url, timeout):
    raise urllib.error.URLError(OSError(101, "Network is unreachable"))
  assert predict.class_names(1000, urlopen=offline) is None
  assert "no ImageNet class names" in caplog.text and predict.IMAGENET_LABELS_URL in caplog.text

  urlopen, asked = serve_from(labels)
  assert predict.class_names(1000, urlopen=urlopen)[0] == "name 0"
  assert predict.class_names(1000, urlopen=urlopen)[0] == "name 0"
  assert asked == [predict.IMAGENET_LABELS_URL]  # fetched once, then read from the cache
  assert os.listdir(tmp_path / "cache" / "vit_jax") == ["ilsvrc2012_wordnet_lemmas.txt"]


def run_predict(*args):
  return subprocess.run([sys.executable, "-m", "vit_jax.predict", *args],
                        env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True,
                        text=True, timeout=120)


def parse(stdout):
  """{image: [(probability, index, name), ...]} from the command's output."""
  results = {}
  for line in stdout.splitlines():
    if not line.startswith(" "):
      image = line.rstrip(":")
      results[image] = []
    else:
      prob, index, name = line.split(maxsplit=2)
      results[image].append((float(prob), int(index), name))
  return results


def test_predict_command_with_released_checkpoint_and_labels(images, tmp_path):
  labels = tmp_path / "labels.txt"
  labels.write_text("".join(f"class-{i}\n" for i in range(10)))
  paths = [images["rgb"], images["photo"], images["gray"]]
  done = run_predict(f"--checkpoint={RELEASED_FIXTURES / 'vit-ti16.npz'}", f"--labels={labels}",
                     "--batch_size=2", *paths)
  assert done.returncode == 0, done.stderr
  results = parse(done.stdout)
  assert list(results) == paths
  for top5 in results.values():
    probs = [p for p, _, _ in top5]
    assert len(top5) == 5 and probs == sorted(probs, reverse=True)
    assert 0 < sum(probs) <= 1 + 1e-3
    assert all(name == f"class-{index}" for _, index, name in top5)


def test_predict_command_errors_are_one_line(images, tmp_path):
  missing = tmp_path / "nope.npz"
  failed = run_predict(f"--checkpoint={missing}", images["rgb"])
  assert failed.returncode == 1 and failed.stdout == ""
  error_lines = [l for l in failed.stderr.splitlines() if l.startswith("error:")]
  assert len(error_lines) == 1 and str(missing) in error_lines[0]
  assert "Traceback" not in failed.stderr

  failed = run_predict(f"--checkpoint={RELEASED_FIXTURES / 'vit-ti16.npz'}", images["rgb"],
                       images["corrupt"])
  assert failed.returncode == 1 and "Traceback" not in failed.stderr
  assert failed.stderr.splitlines()[-1].startswith(f"error: cannot read image {images['corrupt']}")
