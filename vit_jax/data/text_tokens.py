"""Tokenizers of the two-tower models without TensorFlow (the `tokenizers` and
`sentencepiece` packages), giving the ids the reference pipelines give:

* BERT WordPiece (LiT-B16B, B16B_2, L16L; vocabulary `NAME.txt`): tensorflow_text's
  BertTokenizer(lower_case=True) as vision_transformer's preprocess.py runs it: lower case,
  accents stripped, punctuation and CJK split, unknown words -> [UNK]; cut to max_len - 1,
  zero-padded, [CLS] prepended (no [SEP]).
* sentencepiece (LiT-L16S, L16Ti: `NAME.model`; SigLIP: c4_en / mc4; SigLIP 2: Gemma):
  an end-of-sequence id appended and kept last when cut ("sticky", as big_vision and
  models_lit do), padded with eos (LiT, SigLIP) or the model's <pad> (Gemma-sized
  vocabularies: SigLIP 2). SigLIP / SigLIP 2 lower-case the text first as big_vision's
  tf.strings.lower does: ASCII letters only.
* a Hugging Face folder's tokenizer.json, padded / cut to the model's length.
Each takes a list of strings and returns int32 ids [len(texts), max_len].

The input pipelines carry a TokenizerSpec (the file, length and case), which each process
loads once; train_wordpiece writes the BERT vocabulary of a text tower trained from scratch.
"""

import collections
import dataclasses
import functools
import os
from typing import List, Optional, Sequence

import numpy as np

from vit_jax.base import errors, storage

GEMMA_VOCAB = 256_000  # Gemma's vocabulary: padded with <pad>, not eos


def ascii_lower(text: str) -> str:
  """tf.strings.lower with its default encoding: A-Z only (É, Σ stay)."""
  return text.translate(_ASCII_LOWER)


_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def sticky_eos(ids: Sequence[int], max_len: int, eos: int, pad: int) -> List[int]:
  """ids + [eos], cut to max_len keeping eos last, padded with `pad`."""
  ids = list(ids) + [eos]
  if len(ids) >= max_len:
    return ids[:max_len - 1] + [eos]
  return ids + [pad] * (max_len - len(ids))


def _check_texts(texts) -> List[str]:
  if isinstance(texts, str) or not all(isinstance(t, str) for t in texts):
    raise errors.InvalidInput("tokenizers take a list of strings (one text each)")
  return list(texts)


class BertTokenizer:
  """LiT's BERT tokenizer (see the module docstring)."""

  def __init__(self, vocab_path: str, max_len: int = 16):
    from tokenizers import BertWordPieceTokenizer  # pylint: disable=import-outside-toplevel
    vocab = storage.read_text(vocab_path).split("\n")
    if not {"[CLS]", "[SEP]", "[UNK]"} <= set(vocab):  # the tokenizers package needs all 3
      raise errors.InvalidInput(f"{vocab_path} is no BERT vocabulary (one token a line, "
                                "with [CLS], [SEP] and [UNK])")
    self.cls_id = vocab.index("[CLS]")
    self.max_len = max_len
    self._tokenizer = BertWordPieceTokenizer(vocab_path, lowercase=True, clean_text=True,
                                             handle_chinese_chars=True, strip_accents=True)

  def __call__(self, texts: Sequence[str]) -> np.ndarray:
    rows = []
    for text in _check_texts(texts):
      ids = self._tokenizer.encode(text, add_special_tokens=False).ids[:self.max_len - 1]
      rows.append([self.cls_id] + ids + [0] * (self.max_len - 1 - len(ids)))
    return np.asarray(rows, np.int32).reshape(-1, self.max_len)


class SentencePieceTokenizer:
  """LiT's / big_vision's sentencepiece tokenizer (see the module docstring); lower: ASCII
  lower-casing first (SigLIP, SigLIP 2), pad: the padding id (None: eos, or <pad> for a
  Gemma-sized vocabulary)."""

  def __init__(self, model_path: str, max_len: int, *, lower: bool,
               pad: Optional[int] = None):
    import sentencepiece  # pylint: disable=import-outside-toplevel
    self._sp = sentencepiece.SentencePieceProcessor()
    try:
      self._sp.Load(os.fspath(model_path))
    except (OSError, RuntimeError) as e:
      raise errors.InvalidInput(f"{model_path} is no sentencepiece model ({e})") from None
    self.eos_id = self._sp.eos_id()
    if pad is None:
      pad = self._sp.pad_id() if self._sp.GetPieceSize() >= GEMMA_VOCAB else self.eos_id
    self.pad_id, self.max_len, self.lower = pad, max_len, lower

  def __call__(self, texts: Sequence[str]) -> np.ndarray:
    texts = _check_texts(texts)
    texts = [ascii_lower(t) for t in texts] if self.lower else texts
    rows = [sticky_eos(self._sp.EncodeAsIds(t), self.max_len, self.eos_id, self.pad_id)
            for t in texts]
    return np.asarray(rows, np.int32).reshape(-1, self.max_len)


class FolderTokenizer:
  """A Hugging Face folder's tokenizer.json (its normaliser, special tokens and <pad>),
  padded / cut to max_len as its processor does (padding='max_length')."""

  def __init__(self, path: str, max_len: int, *, lower: bool = False):
    from tokenizers import Tokenizer  # pylint: disable=import-outside-toplevel
    self._tokenizer = Tokenizer.from_file(os.fspath(path))
    pad = self._tokenizer.token_to_id("<pad>")
    self._tokenizer.enable_truncation(max_len)
    self._tokenizer.enable_padding(length=max_len, pad_id=pad or 0)
    self.max_len, self.lower = max_len, lower

  def __call__(self, texts: Sequence[str]) -> np.ndarray:
    texts = _check_texts(texts)
    texts = [t.lower() for t in texts] if self.lower else texts
    rows = [e.ids for e in self._tokenizer.encode_batch(texts)]
    return np.asarray(rows, np.int32).reshape(-1, self.max_len)


def for_model(path: str, *, lower: bool, max_len: int, bert: bool):
  """The tokenizer a model's vocabulary file asks for: .txt -> BERT WordPiece, .model ->
  sentencepiece (lower-cased first where the model was trained so), tokenizer.json ->
  FolderTokenizer."""
  if path is None or not os.path.isfile(path):
    found = f"no tokenizer file {path}" if path else "no tokenizer file beside the checkpoint"
    raise errors.InvalidInput(f"{found}: pass --tokenizer=PATH (the model's NAME.txt, "
                              "NAME.model, spiece.model or tokenizer.json)")
  if path.endswith(".json"):
    return FolderTokenizer(path, max_len)
  if path.endswith(".txt") or bert:
    return BertTokenizer(path, max_len)
  return SentencePieceTokenizer(path, max_len, lower=lower)


@dataclasses.dataclass(frozen=True)
class TokenizerSpec:
  """The tokenizer of a vocabulary file (see for_model) as the input pipelines carry it:
  picklable (Grain's worker processes unpickle the pipeline); load() builds it once per
  process, and again only when the file is rewritten."""
  path: str
  max_len: int
  lower: bool = False

  def load(self):
    try:
      stamp = os.stat(self.path)
      stamp = (stamp.st_mtime_ns, stamp.st_size)
    except (OSError, TypeError):  # for_model names the missing file
      stamp = None
    return _loaded(self.path, self.max_len, self.lower, stamp)


@functools.lru_cache(maxsize=8)
def _loaded(path: str, max_len: int, lower: bool, stamp):
  del stamp  # part of the key: a rewritten file is read again
  return for_model(path, lower=lower, max_len=max_len, bert=False)


SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")  # [PAD] is id 0


def train_wordpiece(texts: Sequence[str], vocab_size: int, path: str) -> str:
  """Writes (atomically) a BERT WordPiece vocabulary of at most vocab_size tokens for
  `texts` to `path`, which BertTokenizer reads; returns `path`. The texts are cut into words
  by the normaliser and pre-tokenizer BertTokenizer runs (lower case, accents stripped,
  punctuation split); the vocabulary is SPECIAL_TOKENS, then the characters that start
  words and the ##characters that continue them, then whole words, each by frequency
  (ties by the token). The tokenizers package's own trainer breaks ties between merges by
  ids from randomly seeded hash maps, so it wrote 4 different vocabularies in 6 runs on the
  same texts; this one writes the same file for the same texts."""
  from tokenizers import normalizers, pre_tokenizers  # pylint: disable=import-outside-toplevel
  room = vocab_size - len(SPECIAL_TOKENS)
  if room < 1:
    raise errors.InvalidInput(f"a vocabulary of {vocab_size} tokens has no room past the "
                              f"{len(SPECIAL_TOKENS)} special tokens; give it 1000 or so")
  normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True,
                                          strip_accents=True, lowercase=True)
  split = pre_tokenizers.BertPreTokenizer()
  words = collections.Counter(
      word for text in _check_texts(texts)
      for word, _ in split.pre_tokenize_str(normalizer.normalize_str(text)))
  pieces = collections.Counter()
  for word, count in words.items():
    pieces[word[0]] += count
    for char in word[1:]:
      pieces["##" + char] += count
  by_count = lambda counts: sorted(counts, key=lambda token: (-counts[token], token))
  tokens = by_count(pieces) + [word for word in by_count(words) if len(word) > 1]
  storage.write_atomic(path, "\n".join(SPECIAL_TOKENS + tuple(tokens[:room])) + "\n")
  return path
