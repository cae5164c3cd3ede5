"""SigLIP's sigmoid loss in big_vision's LiT recipe on COCO captions,
configs/proj/image_text/siglip_lit_coco.py: AugReg's ViT-B/16 (ImageNet-21k) image tower
locked, a BERT-base text tower trained with the sigmoid loss (t = log 10, b = -2.71 at
init) at batch 512, 5,000 steps of Adam at lr 1e-3. The loss is chunked: each device keeps
its images and the captions' embeddings travel a ring of devices, so no device holds the
batch x batch logits (--config.contrastive.chunked=False computes the plain global ones).

  python -m vit_jax.download LiT-B16B      # checkpoints/lit/LiT-B16B.txt: BERT's vocabulary
  python -m vit_jax.main --config=configs/siglip_lit_coco.py:checkpoints/lit/LiT-B16B.txt \\
      --workdir=/tmp/siglip_lit_coco        # one GPU, or a TPU slice: TFDS coco_captions
  python -m vit_jax.plan --config=configs/siglip_lit_coco.py --gpu=h100     # or --tpu=v3-8
  python -m vit_jax.plan --config=configs/siglip_lit_coco.py --tpu=v4-32 \\
      --config.batch=32768                  # the paper's 32k: chunked (and =False: not)
  python -m vit_jax.zeroshot --checkpoint=WORKDIR/params.npz --captions=COCO_VAL.tsv

The argument VOCAB is the text tower's vocabulary, a BERT WordPiece vocab.txt (BERT-base
uncased's, as big_vision reads it: Hugging Face's bert-base-uncased/vocab.txt, or the
LiT-B16B.txt above, LiT's BERT-base vocabulary); --config.text.tokenizer=FILE says the
same. Without it the run trains a 30,522-word WordPiece vocabulary on the COCO captions
into WORKDIR/vocab.txt. Data: TFDS coco_captions (config.tfds_data_dir; about 20 GB from
cocodataset.org).

Batch 512 fits one 80 GB GPU or a v3-8 with room to spare (its softmax twin fits them at
4,096); the paper's 32k fits a v4-32, chunked or not (the plan says by how much, and the
largest batch that fits: benchmarks/RESULTS.md, "Two towers: plans"). The published reference for
this recipe family is the softmax one's (configs/lit_coco.py, big_vision's `coco_B16B`:
ImageNet zero-shot 20.7%, COCO image->text 47.2, text->image 32.1 recall@1, with the text
tower started from BERT-base's released weights); big_vision publishes no numbers for the
sigmoid COCO run.
"""

from vit_jax.families.two_tower import training_recipes
from vit_jax.training import config_defaults


def get_config(vocab=None):
  config = training_recipes.coco_pair(config_defaults.get_config(), loss="sigmoid", batch=512)
  if vocab:
    config.text.tokenizer = vocab
  return config
