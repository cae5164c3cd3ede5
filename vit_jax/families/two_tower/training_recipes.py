"""Recipes of trained pairs (configs/siglip_demo.py, lit_demo.py, lit_coco.py,
siglip_lit_coco.py, siglip_finetune.py): the keys of an image-text run added to the shared
defaults a config file passes in, and big_vision's LiT / SigLIP-on-COCO settings."""

import ml_collections


def pair_config(config: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
  """The shared defaults `config` (vit_jax.training.config_defaults.get_config(), on a floor
  above) with an image-text run's keys (config.objective='contrastive',
  vit_jax.training.objectives.contrastive). The image tower is config.model_name /
  config.model.* / config.pretrained as for classifiers."""
  config.objective = "contrastive"
  config.contrastive = ml_collections.ConfigDict()
  config.contrastive.loss = "sigmoid"  # sigmoid (SigLIP) | softmax (CLIP, LiT)
  # sigmoid: the loss over the global batch with each device's captions passed round a
  # ring of devices (no device holds the batch x batch logits); False: the plain logits.
  config.contrastive.chunked = True
  config.contrastive.temperature_init = 10.0  # exp(t) at init (learnable t)
  # sigmoid: the learnable bias b at init (SigLIP paper -10; big_vision's LiT recipe
  # -2.71); the softmax loss has none
  config.contrastive.bias_init = -10.0
  # (image, text) out projections: None uses the tower's own features (both must agree)
  config.contrastive.out_dim = (None, None)
  # A pair's file, Hugging Face folder or released name: both towers, t and b
  config.contrastive.init = ml_collections.FieldReference(None, field_type=str)
  # A pair's file whose text tower starts ours (the image tower: config.pretrained)
  config.contrastive.text_init = ml_collections.FieldReference(None, field_type=str)
  config.text = ml_collections.ConfigDict()
  config.text.tower = "transformer"  # transformer (LiT's / SigLIP's) | bert
  config.text.width, config.text.depth, config.text.mlp_dim, config.text.num_heads = (
      768, 12, 3072, 12)
  config.text.length = 16  # tokens per caption (big_vision's LiT: 16; SigLIP: 64)
  # The vocabulary: NAME.txt (BERT WordPiece), NAME.model (sentencepiece), tokenizer.json.
  # None: the file beside contrastive.init / text_init, else one trained on the training
  # captions (config.text.vocab_size words) and written to WORKDIR/vocab.txt.
  config.text.tokenizer = ml_collections.FieldReference(None, field_type=str)
  config.text.vocab_size = 1_000
  # Labelled data (an image folder, the digits, a TFDS classification set) as captions:
  # each image's captions are every template filled with each variant of its class name
  # (None: the dataset's names; or one list of variants per class, in class order).
  config.captions = ml_collections.ConfigDict()
  config.captions.templates = ml_collections.FieldReference(None, field_type=tuple)
  config.captions.class_names = ml_collections.FieldReference(None, field_type=tuple)
  config.accum_steps = 1  # the loss pairs the whole batch: no micro-batches
  config.optimizer = "adam"
  config.optim_dtype = "float32"
  config.pp.mixup_alpha = 0.0
  return config


# The digits' names said several ways: the demos' captions draw one variant a step.
DIGIT_WORDS = (("zero", "0", "nought"), ("one", "1", "single"), ("two", "2", "pair"),
               ("three", "3", "trio"), ("four", "4", "quad"), ("five", "5", "fiver"),
               ("six", "6", "half dozen"), ("seven", "7", "septet"), ("eight", "8", "octet"),
               ("nine", "9", "ennead"))
# Training captions, and the zero-shot prompts and names the demos are measured with: no
# prompt is ever a training caption (their words are the captions' words: a vocabulary
# trained on the captions cuts unseen words into letters, and a prompt longer than
# config.text.length tokens would lose its class name).
DIGIT_CAPTIONS = ("a handwritten {}.", "the digit {}", "a scan of a {}", "{}",
                  "a small blurry {} written by hand", "number {}")
DIGIT_PROMPTS = ("the handwritten number {}.", "a blurry scan of the digit {}")
DIGIT_NAMES = tuple(words[0] for words in DIGIT_WORDS)


def _digits_pair(config: ml_collections.ConfigDict) -> None:
  """The digits at the classifier demo's 16 px, their captions and zero-shot evaluation."""
  config.dataset, config.train_split, config.eval_split = "digits", "train", "test"
  config.pp.preset, config.pp.resize, config.pp.crop, config.pp.flip = "bit", 18, 16, False
  config.captions.templates = DIGIT_CAPTIONS
  config.captions.class_names = DIGIT_WORDS
  config.text.length, config.text.vocab_size = 16, 200
  config.evals.zeroshot = dict(type="zeroshot", dataset="digits", split="test",
                               class_names=list(DIGIT_NAMES), templates=list(DIGIT_PROMPTS))
  config.batch = config.batch_eval = 128
  config.base_lr, config.weight_decay, config.grad_norm_clip = 1e-3, 1e-4, 1.0
  config.progress_every, config.eval_every, config.checkpoint_every = 50, 250, 500


def _demo_image_tower(config: ml_collections.ConfigDict) -> None:
  """The classifier demo's 4-block ViT (configs/demo.py), 4 px patches."""
  config.model_name = "ViT-Ti_16"
  config.model.update(patch_size=4, hidden_size=64, mlp_dim=128, num_heads=4, num_layers=4)


def siglip_demo(config: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
  """Both towers from scratch on the digits with the chunked sigmoid loss, shaped as SigLIP
  is (a MAP-pooled image tower, a text tower with its head), so the result converts to a
  transformers SiglipModel folder."""
  config = pair_config(config)
  _digits_pair(config)
  _demo_image_tower(config)
  config.model.classifier = "map"
  config.contrastive.out_dim = (None, 64)
  config.pretrained = None
  config.text.update(tower="transformer", width=64, depth=2, mlp_dim=128, num_heads=4)
  config.total_steps, config.warmup_steps = 1_500, 100
  return config


def lit_demo(config: ml_collections.ConfigDict, classifier: str) -> ml_collections.ConfigDict:
  """LiT on the digits: the classifier demo's image tower (its params.npz, head dropped)
  locked, a text tower trained onto its features with the softmax loss."""
  config = pair_config(config)
  _digits_pair(config)
  _demo_image_tower(config)
  config.pretrained = classifier
  config.freeze = "^img/"
  config.contrastive.loss, config.contrastive.bias_init = "softmax", None
  config.text.update(tower="transformer", width=64, depth=2, mlp_dim=128, num_heads=4)
  config.total_steps, config.warmup_steps = 800, 50
  return config


# big_vision's configs/proj/image_text/siglip_lit_coco.py and lit_coco.py: a B/16 image
# tower locked, a BERT-base text tower, COCO captions, 5,000 steps of Adam at lr 1e-3.
COCO_STEPS = 5_000
COCO_LR = 1e-3
# big_vision's wd=0.01 decays by 0.01 x the schedule, not x the learning rate; ours is
# multiplied by the learning rate (optax.add_decayed_weights before the lr): 0.01 / 1e-3.
COCO_WEIGHT_DECAY = 0.01 / COCO_LR
# The image tower: AugReg's B/16 (ImageNet-21k), its class token's features, head dropped.
COCO_IMAGE_TOWER = "augreg/B_16"


def coco_pair(config: ml_collections.ConfigDict, loss: str, batch: int,
              dataset: str = "coco_captions") -> ml_collections.ConfigDict:
  """The COCO recipe (loss 'sigmoid': siglip_lit_coco.py, batch 512; 'softmax':
  lit_coco.py, batch 4096)."""
  config = pair_config(config)
  config.dataset, config.train_split, config.eval_split = dataset, "train", "val"
  config.model_name, config.pretrained, config.freeze = "ViT-B_16", COCO_IMAGE_TOWER, "^img/"
  config.pp.preset, config.pp.crop, config.pp.resize = "bit", 224, 224
  config.pp.flip, config.pp.randaug = True, (2, 10)
  config.contrastive.loss = loss
  config.contrastive.temperature_init = 10.0
  config.contrastive.bias_init = -2.71 if loss == "sigmoid" else None
  config.contrastive.out_dim = (None, 768)
  config.text.update(tower="bert", width=768, depth=12, mlp_dim=3072, num_heads=12,
                     length=16, vocab_size=30_522)
  config.optimizer, config.base_lr, config.weight_decay = "adam", COCO_LR, COCO_WEIGHT_DECAY
  config.grad_norm_clip = 1.0
  config.total_steps = COCO_STEPS
  config.warmup_steps = max(int(0.03 * COCO_STEPS), 100)
  config.batch, config.batch_eval = batch, 512
  config.dtype = "bfloat16"
  config.evals.retrieval = dict(type="retrieval", dataset=dataset, split="val")
  config.progress_every, config.eval_every, config.checkpoint_every = 50, 1_000, 1_000
  return config


# Continuing a released pair on one's own captions: a short, gentle run (both towers
# train; the bias and temperature continue from the file's).
FINETUNE_START = "SigLIP2-B_16-224"
FINETUNE_LR = 1e-5


def finetune_pair(config: ml_collections.ConfigDict, captions: str,
                  start: str = FINETUNE_START) -> ml_collections.ConfigDict:
  """A released SigLIP / SigLIP 2 pair (or any pair's file, folder) continued on a
  captions file (IMAGE<TAB>CAPTION lines), at its native 224 px and 64 tokens."""
  config = pair_config(config)
  config.dataset = config.eval_split = captions  # held out: --config.eval_split=FILE
  config.contrastive.init = start
  config.contrastive.loss = "sigmoid"
  config.text.length = 64
  config.pp.preset, config.pp.crop, config.pp.resize, config.pp.flip = "bit", 224, 224, True
  config.optimizer, config.base_lr, config.weight_decay = "adam", FINETUNE_LR, 1e-4 / FINETUNE_LR
  config.total_steps, config.warmup_steps, config.batch, config.batch_eval = 1_000, 50, 256, 256
  config.dtype = "bfloat16"
  config.evals.retrieval = dict(type="retrieval", captions=captions)
  config.progress_every, config.eval_every, config.checkpoint_every = 25, 250, 250
  return config
