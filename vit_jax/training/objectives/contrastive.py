"""Contrastive image-text training, `config.objective = "contrastive"`: an image tower and a
text tower embedding into one space, trained on image-caption pairs (LiT: the image tower
locked with config.freeze='^img/'; SigLIP: both towers), with the sigmoid loss (chunked
over the devices) or the softmax loss of vit_jax.training.objectives.contrastive_loss.

The pair is built by the model family that has the contract's PairTraining part
(config.contrastive, config.text, the image keys); batches are {'image', 'text' (int32
token ids [B, config.text.length]), 'label'}. Its eval step scores each eval batch's
images against the batch's own captions (the first of each example): the loss, and
`correct` = images whose best-scoring caption is their own (its text: captions made from
class names repeat within a batch). Zero-shot accuracy and retrieval
recall are evaluators of their own (config.evals.<name>.type 'zeroshot', 'retrieval').
params.npz is the pair's released layout, with its tokenizer beside it.
"""

from typing import Any, Dict, List

import jax
import jax.numpy as jnp
import ml_collections

from vit_jax.base import config_checks, errors, storage
from vit_jax.base.console import log
from vit_jax.data import text_tokens
from vit_jax.models import family_registry
from vit_jax.training.objectives import contrastive_loss

LOSSES = ("sigmoid", "softmax")
TRAINED_VOCABULARY = "vocab.txt"  # a vocabulary the run trains, in its workdir


def pair_family():
  return family_registry.with_part("pair_training")


def _embeddings(module, params, images, tokens):
  """(normalised image embeddings, normalised text embeddings), each [B, D]."""
  return module.apply({"params": params}, images, tokens,
                      method=lambda m, x, t: (m.embed_images(x), m.embed_texts(t)))


def _scale_and_bias(params):
  return params["t"][0], params["b"][0] if "b" in params else None


def make_batch_loss(module, config: ml_collections.ConfigDict):
  """batch_loss(params, batch, rng) -> the contrastive loss over the (global) batch."""
  loss = contrastive_loss.loss_fn(config)

  def batch_loss(params, batch, rng):
    del rng  # the towers have no dropout
    zimg, ztxt = _embeddings(module, params, batch["image"], batch["text"])
    t, b = _scale_and_bias(params)
    return loss(zimg, ztxt, t, b)

  return batch_loss


def make_eval_step(module, config: ml_collections.ConfigDict):
  """eval_step(params, batch) -> sums over the real rows: each image's loss against the
  batch's real captions, and whether its best-scoring caption is its own caption's text."""
  sigmoid = config.contrastive.loss == "sigmoid"

  def eval_step(params, batch) -> Dict[str, jax.Array]:
    zimg, ztxt = _embeddings(module, params, batch["image"], batch["text"])
    logits = module.apply({"params": params}, zimg, ztxt, method="logits")
    real = batch["mask"] > 0
    columns = real[None, :]
    own = jnp.eye(logits.shape[0], dtype=bool)
    if sigmoid:
      signs = jnp.where(own, 1.0, -1.0)
      rows = -jnp.sum(jnp.where(columns, jax.nn.log_sigmoid(signs * logits), 0.0), axis=-1)
    else:
      masked = jnp.where(columns, logits, -jnp.inf)
      rows = -jnp.sum(jnp.where(own, jax.nn.log_softmax(masked, axis=-1), 0.0), axis=-1)
    best = jnp.argmax(jnp.where(columns, logits, -jnp.inf), axis=-1)
    # the same caption as its own (class-made captions repeat within a batch)
    correct = jnp.all(batch["text"][best] == batch["text"], axis=-1)
    return {"loss_sum": jnp.sum(jnp.where(real, rows, 0.0)),
            "correct": jnp.sum(real & correct), "examples": jnp.sum(real)}

  return eval_step


def check_config(config: ml_collections.ConfigDict) -> None:
  """What a contrastive run cannot train with, refused before anything is read."""
  if config.get("contrastive") is None or config.get("text") is None:
    raise errors.InvalidInput(
        "config.objective='contrastive' needs config.contrastive and config.text: start "
        f"from one of the image-text configs ({pair_family().guide}, 'Training')")
  config_checks.config_choice(LOSSES, "contrastive.loss",
                              config.contrastive.loss)
  if config.accum_steps != 1:
    raise errors.InvalidInput(
        f"config.accum_steps={config.accum_steps}: the contrastive loss pairs every image "
        "with every caption of the whole batch, which micro-batches would not see; set "
        "accum_steps=1 (a larger batch needs more devices, or the chunked sigmoid loss)")
  if config.pp.mixup_alpha:
    raise errors.InvalidInput(f"config.pp.mixup_alpha={config.pp.mixup_alpha}: mixed images "
                              "have no caption of their own; set mixup_alpha=0")
  if config.pp.get("max_patches") is not None:
    raise errors.InvalidInput("config.pp.max_patches (NaFlex) trains classifiers: pass "
                              "--config.pp.max_patches=0 (square crops) for "
                              "config.objective='contrastive'")
  pair_family().pair_training.check(config)


def _training_captions(split) -> List[str]:
  captions = getattr(split, "captions", None)
  if captions is None:
    raise errors.InvalidInput(
        "config.objective='contrastive' trains on image-caption pairs, but the dataset has "
        "no captions: give a captions file (IMAGE<TAB>CAPTION lines), or set "
        "config.captions.templates to make captions from its class names")
  return [text for index in range(len(captions)) for text in captions.of(index)]


def prepare_text(config: ml_collections.ConfigDict, dataset, workdir: str):
  """The run's vocabulary, kept in the workdir beside params.npz (so vit_jax.zeroshot reads
  the run's files with it): config.text.tokenizer, else the file beside the one the text
  tower starts from, else a WordPiece vocabulary trained on the training captions (kept
  from the first start: a resumed run reads the ids it trained on). Returns the config
  with config.text.tokenizer and vocab_size set to it; the dataset tokenises with it."""
  pair = pair_family().pair_training
  source = config.text.tokenizer or pair.tokenizer_file(config)
  if source is None:
    kept = storage.join(workdir, TRAINED_VOCABULARY)
    if not storage.exists(kept):  # the captions are read only to train one
      captions = _training_captions(dataset.train)
      text_tokens.train_wordpiece(captions, config.text.vocab_size, kept)
      log.info("trained a %d-word vocabulary on the %d training captions: %s",
               config.text.vocab_size, len(captions), kept)
  else:
    kept = storage.join(workdir, pair.kept_tokenizer_name(source))
    if not storage.exists(kept):
      storage.write_atomic(kept, storage.read_bytes(source))
  config = config.copy_and_resolve_references()
  with config.unlocked():
    config.text.tokenizer = kept
  dataset.text_tokenizer = text_tokens.TokenizerSpec(kept, config.text.length,
                                                     pair.lower_cases(config))
  return config


class Contrastive:
  name = "contrastive"
  predicts_classes = False

  def check(self, config: ml_collections.ConfigDict) -> None:
    check_config(config)

  def create_model(self, config: ml_collections.ConfigDict, num_classes: int, *,
                   load_pretrained: bool):
    del num_classes  # captions, not classes
    return pair_family().pair_training.create(config, load_pretrained=load_pretrained)

  def sample_inputs(self, config: ml_collections.ConfigDict):
    return pair_family().pair_training.sample_inputs(config)

  def prepare(self, config: ml_collections.ConfigDict, dataset, workdir: str):
    return prepare_text(config, dataset, workdir)

  def make_batch_loss(self, module, config):
    return make_batch_loss(module, config)

  def make_eval_step(self, module, config):
    return make_eval_step(module, config)

  def export_params(self, params: Any) -> Any:
    return params
