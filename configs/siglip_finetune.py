"""Continue a released SigLIP / SigLIP 2 pair (both towers) on your own captions.

  python -m vit_jax.main --config=configs/siglip_finetune.py:/data/captions.tsv --workdir=DIR
  python -m vit_jax.main --config=configs/siglip_finetune.py:/data/captions.tsv \
      --config.contrastive.init=SigLIP-B_16-224 --workdir=DIR     # another start
  python -m vit_jax.zeroshot --checkpoint=DIR/params.npz --captions=/data/val.tsv

The argument is a file of IMAGE<TAB>CAPTION lines (images relative to it; several lines
per image for several captions, one drawn per step). The start is SigLIP2-B_16-224 (fetched
from the Hub with its tokenizer on first use), or any pair's .npz, Hugging Face SigLIP
folder or released name in --config.contrastive.init; the pair's tokenizer is kept in DIR
beside params.npz. Recall@1/5/10 on the training file is evaluated as it trains (point
--config.evals.retrieval.captions at a held-out file). Plan it first:
  python -m vit_jax.plan --config=configs/siglip_finetune.py:/data/captions.tsv --gpu=...
"""

from vit_jax.families.two_tower import training_recipes
from vit_jax.training import config_defaults


def get_config(captions=None):
  if not captions:
    raise ValueError("configs/siglip_finetune.py takes the captions file: "
                     "--config=configs/siglip_finetune.py:/data/captions.tsv")
  return training_recipes.finetune_pair(config_defaults.get_config(), captions)
