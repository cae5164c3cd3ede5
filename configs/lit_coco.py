"""LiT on COCO captions, big_vision's configs/proj/image_text/lit_coco.py: AugReg's ViT-B/16
(ImageNet-21k) image tower locked, a BERT-base text tower trained onto its features with
the softmax (CLIP) loss over the global batch of 4,096, 5,000 steps of Adam at lr 1e-3.

  python -m vit_jax.download LiT-B16B      # checkpoints/lit/LiT-B16B.txt: BERT's vocabulary
  python -m vit_jax.main --config=configs/lit_coco.py:checkpoints/lit/LiT-B16B.txt \\
      --workdir=gs://BUCKET/lit_coco        # a TPU slice (v3-8 and up): TFDS coco_captions
  python -m vit_jax.plan --config=configs/lit_coco.py --tpu=v3-8      # will it fit? how fast?
  python -m vit_jax.plan --config=configs/lit_coco.py --gpu=h100      # one 80 GB GPU
  python -m vit_jax.zeroshot --checkpoint=WORKDIR/params.npz --folder=IMAGENET_VAL_DIR \
      --classes=@CLASS_NAMES.txt                # ImageNet zero-shot, the target's first number

The argument VOCAB is the text tower's vocabulary, a BERT WordPiece vocab.txt: big_vision
reads BERT-base uncased's (Hugging Face's bert-base-uncased/vocab.txt, 30,522 words; the
LiT-B16B.txt above is the vocabulary of LiT's own BERT-base tower);
--config.text.tokenizer=FILE says the same. Without it the run trains a 30,522-word
WordPiece vocabulary on the COCO captions (config.text.vocab_size) into WORKDIR/vocab.txt.
The data is TFDS coco_captions (config.tfds_data_dir; COCO's files come from
cocodataset.org, about 20 GB).

On one GPU the global batch of 4,096 is what the one device holds (the loss pairs every
image with every caption of the batch: no accumulation). Planned for one H100 80GB (JAX's
default 75% of its memory, 59.7 GiB): the step needs 24.6 GiB, and about 10,600 pairs fit;
on a v3-8, 4.2 GiB of 15.5 GiB per core, about 0.8 h for the 5,000 steps by the TPU
compiler's estimate (benchmarks/RESULTS.md, "Two towers: plans"). A smaller --config.batch
changes the recipe. On a TPU slice the batch is split over the devices and the softmax
loss gathers the embeddings of the global batch.

Target (big_vision's README_lit, run `coco_B16B`: txt=bert_base, img=B/16, this recipe):
ImageNet zero-shot 20.7%, COCO retrieval image->text 47.2, text->image 32.1 (recall@1).
big_vision starts its text tower from the released BERT-base weights; this config trains
it from its initialisation unless --config.contrastive.text_init names a pair's file.
"""

from vit_jax.families.two_tower import training_recipes
from vit_jax.training import config_defaults


def get_config(vocab=None):
  config = training_recipes.coco_pair(config_defaults.get_config(), loss="softmax", batch=4096)
  if vocab:
    config.text.tokenizer = vocab
  return config
