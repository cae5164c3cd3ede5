"""Tokenizers without TensorFlow: BERT WordPiece gives transformers' BertTokenizer ids (LiT's
[CLS]-first, zero-padded layout around them); sentencepiece follows big_vision's sticky-eos
rules; tricky text (unicode, accents, punctuation, over-long, empty) included; a trained
vocabulary is the same file for the same captions."""

import pickle

import numpy as np
import pytest

from vit_jax.base import errors
from vit_jax.data import text_tokens

TRICKY = ["A photo of a Café!", "naïve résumé, São Paulo", "東京 tower", "dog-cat: (x)?",
          "", "   ", ("one two three four five six seven eight nine ten eleven twelve "
                     "thirteen fourteen fifteen sixteen seventeen"), "ÉCOLE", "emoji 🙂 here"]
WORDS = ["a", "photo", "of", "cafe", "!", "naive", "resume", ",", "sao", "paulo", "東", "京",
         "tower", "dog", "-", "cat", ":", "(", "x", ")", "?", "one", "two", "three", "four",
         "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve", "ecole", "emoji",
         "here", "##s", "te", "##en"]


@pytest.fixture(name="vocab", scope="module")
def fixture_vocab(tmp_path_factory):
  path = tmp_path_factory.mktemp("bert") / "vocab.txt"
  path.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + WORDS) + "\n")
  return str(path)


def test_bert_matches_transformers(vocab):
  transformers = pytest.importorskip("transformers")
  reference = transformers.BertTokenizer(vocab, do_lower_case=True)
  ours = text_tokens.BertTokenizer(vocab, max_len=16)(TRICKY)
  for text, row in zip(TRICKY, ours):
    ids = reference.encode(text, add_special_tokens=False)[:15]
    expected = [reference.cls_token_id] + ids + [0] * (15 - len(ids))
    assert row.tolist() == expected, text
  assert ours.dtype == np.int32 and ours.shape == (len(TRICKY), 16)
  assert ours[4].tolist() == [2] + [0] * 15  # empty text: [CLS] then padding


def test_sticky_eos_rules():
  # big_vision's pp docstring, max_len=3, eos=1, pad 0 / 1.
  assert text_tokens.sticky_eos([2], 3, eos=1, pad=0) == [2, 1, 0]
  assert text_tokens.sticky_eos([2, 2], 3, eos=1, pad=0) == [2, 2, 1]
  assert text_tokens.sticky_eos([2, 2, 2], 3, eos=1, pad=0) == [2, 2, 1]
  assert text_tokens.sticky_eos([2], 3, eos=1, pad=1) == [2, 1, 1]
  assert text_tokens.sticky_eos([], 3, eos=1, pad=0) == [1, 0, 0]


def test_ascii_lower_is_tf_strings_lower():
  assert text_tokens.ascii_lower("ÉCOLE Of Σ") == "École of Σ"


@pytest.fixture(name="sp_model", scope="module")
def fixture_sp_model(tmp_path_factory):
  sentencepiece = pytest.importorskip("sentencepiece")
  folder = tmp_path_factory.mktemp("sp")
  corpus = folder / "corpus.txt"
  corpus.write_text("\n".join(["a photo of a cat", "a photo of a dog", "the café in paris",
                               "naïve résumé", "東京 tower at night"] * 20))
  sentencepiece.SentencePieceTrainer.Train(
      input=str(corpus), model_prefix=str(folder / "tiny"), vocab_size=30, minloglevel=2,
      pad_id=0, eos_id=1, unk_id=2, bos_id=-1, character_coverage=1.0)
  return str(folder / "tiny.model")


def test_sentencepiece_lit_and_siglip(sp_model):
  import sentencepiece  # pylint: disable=import-outside-toplevel
  sp = sentencepiece.SentencePieceProcessor(model_file=sp_model)
  lit = text_tokens.SentencePieceTokenizer(sp_model, 8, lower=False)
  siglip = text_tokens.SentencePieceTokenizer(sp_model, 8, lower=True)
  for text in TRICKY:
    raw = sp.EncodeAsIds(text)
    assert lit([text])[0].tolist() == text_tokens.sticky_eos(raw, 8, eos=1, pad=1), text
    lowered = sp.EncodeAsIds(text_tokens.ascii_lower(text))
    assert siglip([text])[0].tolist() == text_tokens.sticky_eos(lowered, 8, eos=1, pad=1)
  assert (lit(TRICKY)[:, -1] == 1).all()  # the pooled last token is always eos
  assert siglip(["A Photo"]).tolist() != lit(["A Photo"]).tolist()


def test_bad_inputs_fail_in_one_line(vocab, tmp_path):
  with pytest.raises(errors.InvalidInput, match="list of strings"):
    text_tokens.BertTokenizer(vocab)("a cat")
  bad = tmp_path / "words.txt"
  bad.write_text("cat\ndog\n")
  with pytest.raises(errors.InvalidInput, match="no BERT vocabulary"):
    text_tokens.BertTokenizer(str(bad))
  bad.write_text("[PAD]\n[UNK]\n[CLS]\ncat\n")  # no [SEP]: the tokenizers package's TypeError
  with pytest.raises(errors.InvalidInput, match=r"\[SEP\]"):
    text_tokens.BertTokenizer(str(bad))
  with pytest.raises(errors.InvalidInput, match="--tokenizer"):
    text_tokens.for_model(None, lower=False, max_len=16, bert=True)


def test_folder_tokenizer_matches_transformers_fast_tokenizer(vocab, tmp_path):
  transformers = pytest.importorskip("transformers")
  from tokenizers import BertWordPieceTokenizer  # pylint: disable=import-outside-toplevel
  path = str(tmp_path / "tokenizer.json")
  BertWordPieceTokenizer(vocab, lowercase=True).save(path)
  reference = transformers.PreTrainedTokenizerFast(tokenizer_file=path, pad_token="[PAD]")
  expected = reference(TRICKY, padding="max_length", truncation=True, max_length=8)["input_ids"]
  ours = text_tokens.FolderTokenizer(path, 8)(TRICKY)
  assert ours.tolist() == expected
  assert ours.shape == (len(TRICKY), 8)


CAPTIONS = ["A photo of the number Zero.", "a café, handwritten 7", "the number zero",
            "Un numéro: sept!"]


def test_a_trained_vocabulary_is_deterministic_and_read_by_bert_tokenizer(tmp_path):
  first = text_tokens.train_wordpiece(CAPTIONS, 60, str(tmp_path / "a" / "vocab.txt"))
  again = text_tokens.train_wordpiece(CAPTIONS[::-1], 60, str(tmp_path / "b.txt"))
  assert open(first).read() == open(again).read()
  vocab = open(first).read().split("\n")[:-1]
  assert vocab[:5] == list(text_tokens.SPECIAL_TOKENS) and len(set(vocab)) == len(vocab) <= 60
  assert {"number", "zero", "cafe", "sept", "##e"} <= set(vocab)
  ids = text_tokens.BertTokenizer(first, max_len=6)(["The number ZERO", "numero sept zebra"])
  words = lambda row: [vocab[i] for i in row]
  assert words(ids[0]) == ["[CLS]", "the", "number", "zero", "[PAD]", "[PAD]"]
  assert words(ids[1])[:3] == ["[CLS]", "numero", "sept"]
  assert "[UNK]" not in words(ids[1])  # an unseen word is spelled out in pieces
  small = open(text_tokens.train_wordpiece(CAPTIONS, 12, str(tmp_path / "c.txt"))).read()
  assert len(small.split()) == 12


def test_a_tokenizer_spec_pickles_and_loads_once_per_process(tmp_path):
  path = text_tokens.train_wordpiece(CAPTIONS, 60, str(tmp_path / "vocab.txt"))
  spec = pickle.loads(pickle.dumps(text_tokens.TokenizerSpec(path, 8)))
  assert spec.load() is spec.load()
  np.testing.assert_array_equal(spec.load()(CAPTIONS),
                                text_tokens.BertTokenizer(path, max_len=8)(CAPTIONS))
  with pytest.raises(errors.InvalidInput, match="no tokenizer file"):
    text_tokens.TokenizerSpec(str(tmp_path / "gone.txt"), 8).load()
