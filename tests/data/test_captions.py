"""Captions in both input stacks: the same token ids from tf.data and Grain for the same
examples and seed (a captions file, the digits with templates), one caption drawn per step,
seeded and resumed exactly, each example's first caption at evaluation; and the one-line
refusals of an image-text dataset."""

import numpy as np
import pytest

from helpers import make_config, train, write_image
from vit_jax.base import errors
from vit_jax.data import captions, loaders, order, splits, text_tokens
from vit_jax.data.grain_stack import grain_pipeline
from vit_jax.data.tf_stack import tf_pipeline

LENGTH = 8
TEMPLATES = ("a photo of a {}.", "the number {}")
# image -> its captions: one, two or three, and one image named on lines apart
CAPTIONS = {"a.png": ["A red square", "a small red thing", "red!"], "b.png": ["a blue line"],
            "c.png": ["green dots", "many green dots"], "d.png": ["a grey cat"],
            "e.png": ["a white dog", "one dog", "dog on grass"]}


@pytest.fixture(name="files", scope="module")
def fixture_files(tmp_path_factory):
  """(train captions file, vocabulary): five images, and a held-out file of two."""
  root = tmp_path_factory.mktemp("captions")
  lines = [(image, text) for image, texts in CAPTIONS.items() for text in texts]
  lines.append(lines.pop(0))  # a.png on lines apart: "A red square" becomes its last
  for image in CAPTIONS:
    write_image(str(root / "images" / image), size=(14, 10))
  (root / "train.tsv").write_text("".join(f"images/{i}\t{t}\n" for i, t in lines))
  (root / "val.tsv").write_text("images/b.png\ta blue line\nimages/d.png\ta cat\n"
                                "images/d.png\tgrey cat\n")
  texts = [t for texts in CAPTIONS.values() for t in texts] + [
      template.replace("{}", name) for template in TEMPLATES for name in "0123456789"]
  vocab = text_tokens.train_wordpiece(texts, 200, str(root / "vocab.txt"))
  return str(root / "train.tsv"), vocab


def pair_config(dataset, loader, vocab, **settings):
  config = make_config(dataset)
  config.loader, config.objective, config.eval_split = loader, "contrastive", "val.tsv"
  config.text = {"tokenizer": vocab, "length": LENGTH, "lower": False}
  config.captions = {"templates": None, "class_names": None}
  for key, value in settings.items():
    config[key] = value
  return config


def opened(dataset, vocab, **settings):
  return {loader: loaders.open_dataset(pair_config(dataset, loader, vocab, **settings))
          for loader in ("tf", "grain")}


def drawn_texts(split, seed, step, batch_size):
  """The captions the order rule draws for the rows of a step."""
  positions = order.row_positions(step, batch_size, 0, 1)
  indices = order.stream_indices(seed, positions, len(split))
  texts = [split.captions.of(int(i)) for i in indices]
  return [t[order.caption_choice(seed, p, len(t))] for t, p in zip(texts, positions)]


def test_both_stacks_feed_the_same_token_ids_of_a_captions_file(files):
  path, vocab = files
  datasets = opened(path, vocab)
  assert isinstance(datasets["grain"], grain_pipeline.Dataset)
  assert isinstance(datasets["tf"], tf_pipeline.Dataset)
  assert datasets["tf"].info.class_names == [] and datasets["tf"].info.num_train == 5
  assert datasets["tf"].fingerprints() == datasets["grain"].fingerprints()
  tokenizer = text_tokens.BertTokenizer(vocab, LENGTH)
  batches = {loader: train(dataset, num_steps=3, batch_size=4)
             for loader, dataset in datasets.items()}
  for step, (ours, theirs) in enumerate(zip(batches["grain"], batches["tf"])):
    assert ours["text"].dtype == theirs["text"].dtype == np.int32
    np.testing.assert_array_equal(ours["text"], theirs["text"])
    np.testing.assert_array_equal(
        ours["text"], tokenizer(drawn_texts(datasets["tf"].train, 3, step, 4)))
    np.testing.assert_array_equal(ours["label"], np.zeros(4, np.int32))
    assert ours["image"].shape == theirs["image"].shape == (4, 16, 16, 3)
  evaluated = {loader: list(dataset.eval_batches(batch_size=4, process_index=0,
                                                 process_count=1))
               for loader, dataset in datasets.items()}
  (ours,), (theirs,) = evaluated["grain"], evaluated["tf"]
  np.testing.assert_array_equal(ours["text"], theirs["text"])
  np.testing.assert_array_equal(ours["mask"], [1, 1, 0, 0])
  np.testing.assert_array_equal(
      ours["text"], tokenizer(["a blue line", "a cat", "a cat", "a cat"]))  # padding: last
  assert np.abs(ours["image"] - theirs["image"]).max() * 127.5 <= 1.0


def test_each_step_draws_a_caption_seeded_and_a_resume_draws_the_same(files):
  """Two epochs of the five images, each step's captions drawn by (seed, position)."""
  path, vocab = files
  for dataset in opened(path, vocab).values():
    assert dataset.train.captions.of(0) == ["a small red thing", "red!", "A red square"]
    whole = train(dataset, num_steps=5, batch_size=4)
    resumed = train(dataset, start_step=3, num_steps=5, batch_size=4)
    for ours, theirs in zip(resumed, whole[3:]):
      for key in ours:
        np.testing.assert_array_equal(ours[key], theirs[key])
    examples = order.stream_indices(3, np.arange(20), 5)
    texts = np.concatenate([b["text"] for b in whole])
    seen = [{tuple(ids) for ids in texts[examples == i]} for i in range(5)]
    assert len(seen[1]) == len(seen[3]) == 1 and max(map(len, seen)) > 1
    other_seed = list(dataset.train_batches(batch_size=4, start_step=0, num_steps=5, seed=4,
                                            process_index=0, process_count=1))
    assert any(not np.array_equal(a["text"], b["text"]) for a, b in zip(other_seed, whole))


def test_the_digits_with_templates_give_both_stacks_the_same_ids(files):
  _, vocab = files
  variants = [(name, f"digit {name}") for name in "0123456789"]
  datasets = opened("digits", vocab,
                    captions={"templates": TEMPLATES, "class_names": variants})
  split = datasets["grain"].train
  assert split.captions.of(0) == [template.replace("{}", name) for template in TEMPLATES
                                  for name in variants[split.labels[0]]]
  tokenizer = text_tokens.BertTokenizer(vocab, LENGTH)
  batches = {loader: train(dataset, num_steps=2, batch_size=8)
             for loader, dataset in datasets.items()}
  for step, (ours, theirs) in enumerate(zip(batches["grain"], batches["tf"])):
    np.testing.assert_array_equal(ours["label"], theirs["label"])
    np.testing.assert_array_equal(ours["text"], theirs["text"])
    np.testing.assert_array_equal(ours["text"], tokenizer(drawn_texts(split, 3, step, 8)))
  first = {loader: next(iter(dataset.eval_batches(batch_size=8, process_index=0,
                                                  process_count=1)))
           for loader, dataset in datasets.items()}
  np.testing.assert_array_equal(first["grain"]["text"], first["tf"]["text"])
  np.testing.assert_array_equal(first["tf"]["text"], tokenizer(
      [f"a photo of a {variants[label][0]}." for label in first["tf"]["label"]]))


def test_worker_processes_feed_the_threads_token_ids(files):
  """The tokenizer travels to Grain's worker processes by its file (TokenizerSpec)."""
  path, vocab = files
  threads = loaders.open_dataset(pair_config(path, "grain", vocab))
  workers = loaders.open_dataset(pair_config(path, "grain", vocab, grain_workers=1))
  for ours, theirs in zip(train(workers, num_steps=2, batch_size=4),
                          train(threads, num_steps=2, batch_size=4)):
    np.testing.assert_array_equal(ours["text"], theirs["text"])


def test_a_tokenizer_set_later_is_used_and_none_at_all_is_one_line(files):
  path, vocab = files
  config = pair_config(path, "tf", vocab)
  config.text.tokenizer = None
  dataset = loaders.open_dataset(config)
  assert dataset.text_tokenizer is None
  with pytest.raises(errors.InvalidInput, match=r"^.*train.tsv has captions but no tokenizer: "
                     r"set config.text.tokenizer to the text tower's vocabulary"):
    train(dataset, num_steps=1)
  dataset.text_tokenizer = text_tokens.TokenizerSpec(vocab, 5)
  assert train(dataset, num_steps=1)[0]["text"].shape == (8, 5)


@pytest.mark.parametrize("settings, message", [
    ({"dataset": "digits"}, r"^digits has labels, not captions: set "
                            r"config.captions.templates \(e.g. \('a photo of a \{\}.',\)\)"),
    ({"dataset": "digits", "captions": {"templates": ("a {} and {}",), "class_names": None}},
     r"^config.captions.templates=\('a \{\} and \{\}',\) must be templates with one \{\}"),
    ({"dataset": "digits", "captions": {"templates": "clip_paper", "class_names": ("a", "b")}},
     r"^config.captions.class_names has 2 entries for 10 classes \(0, 1, 2...\): give one "
     r"list of non-empty names per class"),
    ({"objective": "classification"}, r"train.tsv holds captions, not classes: it trains an "
                                      r"image-text pair \(config.objective='contrastive'\)$"),
    ({"pp": {"mixup_alpha": 0.2}}, r"^config.pp.mixup_alpha=0.2 mixes images but not their "
                                   r"captions: set it to 0 for image-text data$"),
])
def test_what_image_text_data_refuses_is_one_line(files, settings, message):
  path, vocab = files
  config = pair_config(path, "grain", vocab)
  config.update(settings)
  with pytest.raises(errors.InvalidInput, match=message):
    loaders.open_dataset(config)


def test_class_captions_fill_every_template_with_every_variant():
  assert captions.class_captions(["a {}.", "{}"], [("cat", "kitty"), ("dog",)]) == (
      ("a cat.", "a kitty.", "cat", "kitty"), ("a dog.", "dog"))
  config = make_config()
  config.captions = {"templates": "class_name_only", "class_names": [["zero", "0"], "one"]}
  assert captions.templates_of(config) == ["{}"]
  assert captions.class_variants(config, ["0", "1"]) == [("zero", "0"), ("one",)]


def test_captions_from_class_names_need_one_class_per_image_read_by_index():
  config = make_config("big_tfds")
  config.objective, config.captions = "contrastive", {"templates": ("a {}",),
                                                      "class_names": None}
  labels = splits.IndexedSplit(np.zeros((2, 4, 4, 3), np.uint8), np.eye(2, dtype=np.int32),
                               "pixels")
  with pytest.raises(errors.InvalidInput, match=r"^big_tfds has several labels per image: "
                     "captions from class names take one class per image$"):
    captions.attach(config, (labels, labels, ["a", "b"]))
  streamed = splits.StreamingSplit(None, "train", 10)
  with pytest.raises(errors.InvalidInput, match=r"^big_tfds is streamed \(over 2 GiB\): "
                     r"captions from its class names need examples read by index; set "
                     r"config.loader='grain' \(TFDS prepared as array_record\)$"):
    captions.attach(config, (streamed, streamed, ["a", "b"]))
