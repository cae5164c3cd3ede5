"""configs/lit_coco.py and siglip_lit_coco.py: big_vision's COCO recipes of the two losses,
with the vocabulary as their argument and the published run as their target."""

import pytest

from helpers import load_module
from vit_jax.training import objectives


@pytest.mark.parametrize("file,loss,batch,bias", [("lit_coco.py", "softmax", 4096, None),
                                                   ("siglip_lit_coco.py", "sigmoid", 512, -2.71)])
def test_a_coco_recipe_takes_its_vocabulary_and_quotes_its_target(file, loss, batch, bias):
  module = load_module(file)
  config = module.get_config()
  assert (config.contrastive.loss, config.batch, config.contrastive.bias_init) == (
      loss, batch, bias)
  assert (config.freeze, config.text.tower, config.text.length) == ("^img/", "bert", 16)
  assert config.text.tokenizer is None  # the run trains one on the captions
  objectives.get(config).check(config)
  assert module.get_config("/data/vocab.txt").text.tokenizer == "/data/vocab.txt"
  assert all(number in module.__doc__ for number in ("20.7", "47.2", "32.1"))
  assert "AugReg's ViT-B/16" in module.__doc__ and "--tpu=v3-8" in module.__doc__
  assert "--gpu=h100" in module.__doc__
