"""The pair the main job trains with the contrastive objective (the family contract's
PairTraining part), built from a training config:

  * config.contrastive.init: a two-tower file, Hugging Face SigLIP folder or released name
    gives both towers, t and b (LiT files have no b: a sigmoid loss adds one at bias_init);
  * else the image tower is the ViT of config.model_name / config.model.*, from
    config.pretrained when set (a classifier's or an image model's file, or a pair's image
    tower), and the text tower is config.contrastive.text_init's (a pair's file) or
    config.text's from scratch.
Heads: config.contrastive.out_dim = (image, text) sizes, None for a tower's own features
(its pooled representation); a file's towers keep their heads.
"""

import os
from typing import Any, Dict, Optional, Tuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import traverse_util

from vit_jax.base import errors, storage
from vit_jax.checkpoints import hub, npz
from vit_jax.families.two_tower import npz_file, text_tower
from vit_jax.families.two_tower import model as two_tower
from vit_jax.models import family_registry, model_config

TOWERS = ("transformer", "bert")


def check(config) -> None:
  """What no pair can be built from: a text tower kind, head sizes, text length."""
  contrastive, text = config.contrastive, config.text
  if text.tower not in TOWERS:
    raise errors.InvalidInput(f"config.text.tower={text.tower!r}: choose one of "
                              f"{', '.join(TOWERS)}")
  out_dim = tuple(contrastive.out_dim)
  if len(out_dim) != 2 or not all(d is None or (isinstance(d, int) and d > 0) for d in out_dim):
    raise errors.InvalidInput(f"config.contrastive.out_dim={contrastive.out_dim!r} must be "
                              "(image, text) head sizes, each None (the tower's features) or "
                              "> 0, e.g. (None, 768)")
  if not isinstance(text.length, int) or text.length < 2:
    raise errors.InvalidInput(f"config.text.length={text.length!r} must be >= 2 tokens "
                              "(LiT and SigLIP use 16 or 64)")


def sample_inputs(config) -> Tuple[Any, ...]:
  crop = config.pp.crop
  return (jnp.zeros((1, crop, crop, 3), jnp.float32),
          jnp.zeros((1, config.text.length), jnp.int32))


def tokenizer_file(config) -> Optional[str]:
  """The vocabulary beside the file the text tower comes from."""
  source = config.contrastive.init or config.contrastive.text_init
  if source is None:
    return None
  return npz_file.tokenizer_beside(hub.resolve(source))


def kept_tokenizer_name(path: str) -> str:
  """The name a run's vocabulary takes beside its params.npz, where load_two_tower (and so
  vit_jax.zeroshot) finds it: a folder's own tokenizer names keep theirs, a NAME.txt is
  vocab.txt, a NAME.model spiece.model."""
  name = os.path.basename(path)
  if name in npz_file.FOLDER_TOKENIZERS:
    return name
  return "vocab.txt" if name.endswith(".txt") else "spiece.model"


def lower_cases(config) -> bool:
  """Whether captions are ASCII lower-cased before a sentencepiece vocabulary: as
  zero-shot reads a file with a bias (the sigmoid loss's), so training and zero-shot feed
  the same ids."""
  return config.contrastive.loss == "sigmoid"


def _load_pair(source: str):
  """(module, params) of a pair's file, folder or released name (fetched first)."""
  module, params, _ = npz_file.load_two_tower(hub.resolve(source))
  return module, params


def _text_from_config(config, vocab_size: int):
  text, out_dim = config.text, config.contrastive.out_dim[1]
  dtype = jnp.dtype(config.dtype)
  if text.tower == "bert":
    return text_tower.BertTextEncoder(out_dim, text.width, text.depth, text.mlp_dim,
                                      text.num_heads, vocab_size,
                                      max_length=max(text.length, 16), dtype=dtype)
  return text_tower.TextTransformer(out_dim, text.width, text.depth, text.mlp_dim,
                                    text.num_heads, vocab_size=vocab_size,
                                    max_len=text.length, dtype=dtype)


def vocabulary_size(path: Optional[str]) -> int:
  """The rows a text tower's token table needs for a vocabulary file: a WordPiece
  NAME.txt's lines, a sentencepiece model's pieces, a tokenizer.json's vocabulary."""
  if not path:
    raise errors.InvalidInput("config.text.tokenizer is not set: give the vocabulary file "
                              "(NAME.txt, NAME.model, tokenizer.json) of the text tower")
  if path.endswith(".txt"):
    return len(storage.read_text(path).rstrip("\n").split("\n"))
  if path.endswith(".json"):
    from tokenizers import Tokenizer  # pylint: disable=import-outside-toplevel
    return Tokenizer.from_file(path).get_vocab_size()
  import sentencepiece  # pylint: disable=import-outside-toplevel
  return sentencepiece.SentencePieceProcessor(model_file=path).GetPieceSize()


def _vocabulary_rows(config, load_pretrained: bool) -> int:
  """The token table's rows of a text tower from scratch: its vocabulary file's entries. A
  pair built for its shapes alone (load_pretrained=False: plan, benchmark) reads no file
  that is not local, and takes config.text.vocab_size where the file is remote or the run
  will train one."""
  path = config.text.tokenizer
  if not load_pretrained and (not path or storage.is_url(path)):
    return config.text.vocab_size
  return vocabulary_size(path)


def _text_flops(txt, length: int) -> float:
  """Matmul FLOPs (2 per multiply-add) of one caption of `length` tokens through a text
  tower (LiT's transformer, BERT or SigLIP's: the same blocks), its head included; the
  token table is a lookup."""
  d, m = txt.width, txt.mlp_dim
  per_layer = 2 * length * (4 * d * d + 2 * d * m) + 4 * length * length * d
  return txt.depth * per_layer + 2 * d * (txt.num_classes or 0)


def flops(module, config) -> Dict[str, Optional[float]]:
  """Matmul FLOPs of one pair's forward pass by tower, keyed as the params are ('img', 'txt':
  what config.freeze names): the image at config.pp.crop as its family counts it (None
  where it does not), the caption at config.text.length tokens."""
  image = family_registry.geometry(module.img).flops_per_image(module.img, config.pp.crop)
  return {"img": image, "txt": _text_flops(module.txt, config.text.length)}


def _image_tower(config, load_pretrained: bool):
  """(image tower, its params or None) of config.model_name / config.pretrained."""
  out_dim = config.contrastive.out_dim[0] or 0
  if not (load_pretrained and config.pretrained):
    return model_config.model_from_config(config, out_dim), None
  return npz.load_npz(hub.resolve(config.pretrained), image_size=config.pp.crop,
                      num_classes=out_dim, model_name=config.model_name,
                      allow_nonfinite=config.get("allow_nonfinite_pretrained", False),
                      **model_config.config_overrides(config))


def _features(module) -> int:
  """The width of what an image tower's representation or text tower's output is."""
  return module.num_classes or getattr(module, "representation_size", None) or (
      module.hidden_size if hasattr(module, "hidden_size") else module.width)


def _pair_module(config, img, txt) -> two_tower.TwoTower:
  contrastive = config.contrastive
  bias = contrastive.bias_init if contrastive.loss == "sigmoid" else None
  pair = two_tower.TwoTower(img, txt, image_head=bool(img.num_classes), bias_init=bias,
                            temperature_init=contrastive.temperature_init)
  if _features(img) != _features(txt):
    raise errors.InvalidInput(
        f"the image tower embeds into {_features(img)} and the text tower into "
        f"{_features(txt)} dimensions: set config.contrastive.out_dim to one size for both "
        f"(e.g. ({_features(txt)}, {_features(txt)})), or make the widths equal")
  return pair


def _initialised(module, config) -> Dict[str, Any]:
  init = jax.jit(module.init)
  return jax.device_get(init(jax.random.PRNGKey(config.seed), *sample_inputs(config)))["params"]


def _merged(fresh: Dict[str, Any], loaded: Dict[str, Any]) -> Dict[str, Any]:
  """fresh with every array `loaded` has (same paths) replaced by loaded's."""
  flat = traverse_util.flatten_dict(fresh, sep="/")
  for key, value in traverse_util.flatten_dict(loaded, sep="/").items():
    if key in flat:
      if np.shape(flat[key]) != np.shape(value):
        raise errors.InvalidInput(f"{key} of the file is {np.shape(value)} but the config "
                                  f"builds {np.shape(flat[key])}: match the config to the file")
      flat[key] = np.asarray(value, np.float32)
  return traverse_util.unflatten_dict(flat, sep="/")


def create(config, *, load_pretrained: bool):
  """(TwoTower, host params or None); see the module docstring."""
  contrastive = config.contrastive
  if contrastive.init:
    file_module, file_params = _load_pair(contrastive.init)
    bias = file_module.bias_init
    if contrastive.loss == "sigmoid" and bias is None:
      bias = contrastive.bias_init
    module = file_module.clone(bias_init=bias)
    if not load_pretrained:
      return module, None
    params = dict(file_params)
    if bias is not None and "b" not in params:
      params["b"] = np.full((1,), bias, np.float32)
    return module, params
  img, img_params = _image_tower(config, load_pretrained)
  if contrastive.text_init:
    txt_pair, txt_pair_params = _load_pair(contrastive.text_init)
    txt, txt_params = txt_pair.txt, txt_pair_params["txt"]
  else:
    txt, txt_params = _text_from_config(config, _vocabulary_rows(config, load_pretrained)), None
  module = _pair_module(config, img, txt)
  if not load_pretrained:
    return module, None
  loaded = {}
  if img_params is not None:
    loaded["img"] = img_params
  if txt_params is not None:
    loaded["txt"] = txt_params
  return module, _merged(_initialised(module, config), loaded) if loaded else None
