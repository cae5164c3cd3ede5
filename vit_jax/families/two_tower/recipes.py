"""SigLIP / SigLIP 2 image towers fine-tuned as classifiers (configs/siglip2_*.py): the
recipe a config file applies to the shared defaults it passes in
(vit_jax.training.config_defaults, on a floor above the families).

The main job loads only the image tower of a two-tower file (a released name such as
SigLIP2-B_16-224, a big_vision / LiT `.npz` or a Hugging Face SigLIP folder: load_npz reads
its `img/` arrays), keeps its MAP head (config.model.classifier='map'; 'gap' averages the
tokens instead and leaves the MAP head out), and adds a new zero-initialised linear head.
Any crop works: the learned position embedding is resized as for a ViT.

The recipe is a starting point, not a tuned result (nothing here was measured at scale):
AdamW with decoupled weight decay 0.05, a cosine schedule after a short warm-up, global
batch 512, label smoothing 0.1, gradient clipping at 1 and BEiT / timm layer-wise decay,
deeper towers decaying more gently, as the layer-decay fine-tunes of CLIP and SigLIP towers
do. The head's rate is config.base_lr; block i trains at base_lr * layer_decay **
(num_layers - i).
"""

import ml_collections

# size -> (the zoo name whose keys the config overrides, the tower's geometry, layer decay,
# the released SigLIP 2 file at its native size, that size's crop in pixels).
TOWERS = {
    "B_16": ("ViT-B_16", dict(patch_size=16, hidden_size=768, mlp_dim=3072, num_heads=12,
                              num_layers=12), 0.65, "SigLIP2-B_16-224", 224),
    "L_16": ("ViT-L_16", dict(patch_size=16, hidden_size=1024, mlp_dim=4096, num_heads=16,
                              num_layers=24), 0.75, "SigLIP2-L_16-256", 256),
    # 384 px gives 27 patches of 14 px per side: the file's 27 x 27 table, 378 px.
    "So400m_14": ("ViT-L_16", dict(patch_size=14, hidden_size=1152, mlp_dim=4304,
                                   num_heads=16, num_layers=27), 0.8,
                  "SigLIP2-So400m_14-384", 378),
}
BATCH = 512
BASE_LR = 3e-4
WEIGHT_DECAY = 0.05
WARMUP_STEPS = 500
LABEL_SMOOTHING = 0.1


def classifier_config(config: ml_collections.ConfigDict,
                      size: str) -> ml_collections.ConfigDict:
  """The fine-tuning config of a SigLIP 2 tower (`size`: a key of TOWERS) from `config`:
  the shared defaults at the dataset (config_defaults.finetune_defaults: a preset, a TFDS
  name or an image folder, ImageNet by default), its steps as for a ViT."""
  zoo_name, geometry, layer_decay, pretrained, crop = TOWERS[size]
  config.model_name = zoo_name
  config.model.update(geometry)
  config.model.classifier = "map"  # 'gap': mean of the tokens; the MAP head is left out
  config.model.dropout_rate = 0.0
  config.pretrained = pretrained
  config.pp.preset, config.pp.crop, config.pp.flip = "inception", crop, True
  config.optimizer, config.optim_dtype = "adamw", "float32"
  config.base_lr, config.weight_decay = BASE_LR, WEIGHT_DECAY
  config.decay_type, config.warmup_steps, config.grad_norm_clip = "cosine", WARMUP_STEPS, 1.0
  config.batch, config.batch_eval = BATCH, BATCH
  config.label_smoothing = LABEL_SMOOTHING
  config.layer_decay = layer_decay
  return config


# NaFlex towers (configs/siglip2_*_naflex.py): size -> (the TOWERS key of the same width,
# the released NaFlex file). Each image is read at its own aspect ratio in at most
# NAFLEX_BUDGET patches of 16 px (config.pp.max_patches: 256, 576, 1024, ...); the file's
# 16 x 16 position table is resized to each image's grid in the step.
NAFLEX = {"B_16": ("B_16", "SigLIP2-B_16-NaFlex"),
          "So400m_16": ("So400m_14", "SigLIP2-So400m_16-NaFlex")}
NAFLEX_BUDGET = 256
NAFLEX_PATCH = 16
NAFLEX_GRID = 16


def naflex_config(config: ml_collections.ConfigDict, size: str) -> ml_collections.ConfigDict:
  """classifier_config's recipe for a NaFlex tower (`size`: a key of NAFLEX). pp.crop is
  NAFLEX_GRID patches: the table side of a model built without the file (plan, benchmark)."""
  tower, pretrained = NAFLEX[size]
  config = classifier_config(config, tower)
  config.model.patch_size = NAFLEX_PATCH
  config.pretrained = pretrained
  config.pp.crop = NAFLEX_GRID * NAFLEX_PATCH
  config.pp.max_patches = NAFLEX_BUDGET
  return config
