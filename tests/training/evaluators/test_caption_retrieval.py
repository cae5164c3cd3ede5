"""The retrieval evaluator of image-text runs: on a captions file its recall@k both ways is
python -m vit_jax.zeroshot --captions's on the saved file; the same file opened as a
dataset (read on the mesh with the eval preprocessing, every caption of each image) scores
the same pixels; one-line refusals."""

import json
import pathlib
import types

import jax
import ml_collections
import pytest
from absl import flags

import two_tower_helpers
from vit_jax import zeroshot
from vit_jax.base import errors
from vit_jax.data import text_tokens
from vit_jax.data.sources import digits
from vit_jax.training import config_defaults, sharding
from vit_jax.training.evaluators import caption_retrieval

IMAGES = 40  # of the digits' test split


@pytest.fixture(name="pair", scope="module")
def fixture_pair(tmp_path_factory):
  return two_tower_helpers.save_digits_pair(tmp_path_factory.mktemp("pair"))


@pytest.fixture(name="captions", scope="module")
def fixture_captions(pair):
  """A captions file of the first IMAGES digits (paths relative to it), every third with a
  second caption."""
  folder = pathlib.Path(pair[3])
  lines = []
  for index, digit in enumerate(digits.digits_source()[1].labels[:IMAGES]):
    word = two_tower_helpers.DIGIT_WORDS[digit]
    lines.append(f"test/{digit}/{index:03d}.png\ta photo of the number {word}.")
    if index % 3 == 0:
      lines.append(f"test/{digit}/{index:03d}.png\t{word.upper()}")
  (folder / "captions.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
  return str(folder / "captions.tsv")


def config_with(evals, objective="contrastive"):
  config = config_defaults.demo_config()
  config.objective, config.loader = objective, "grain"
  config.pp.resize, config.pp.crop = 36, 32
  config.batch_eval, config.eval_every = 16, 5
  config.evals = ml_collections.ConfigDict(evals)
  return config


def build(config, pair):
  module, params, path, _ = pair
  caption_retrieval.check(config, False)
  mesh = sharding.make_mesh({"data": -1})
  dataset = types.SimpleNamespace(text_tokenizer=text_tokens.TokenizerSpec(path[:-4] + ".txt",
                                                                           max_len=8))
  state = types.SimpleNamespace(eval_params=jax.device_put(params, sharding.replicated(mesh)))
  return caption_retrieval.build(config, module, mesh, dataset, None), state


def test_recall_is_zeroshots_on_the_saved_file(pair, captions, monkeypatch, tmp_path):
  config = config_with({"file": dict(type="retrieval", captions=captions),
                        "split": dict(type="retrieval", dataset=f"captions:{captions}")})
  evaluators, state = build(config, pair)
  metrics = {k: v for e in evaluators for k, v in e.run(state, step=5).items()}
  values = flags.FlagValues()
  zeroshot.define_flags(values)
  monkeypatch.setattr(zeroshot, "FLAGS", values)
  zeroshot.main(values(["zeroshot", f"--checkpoint={pair[2]}", f"--captions={captions}",
                        f"--json={tmp_path / 'recall.json'}"]), values)
  saved = json.loads((tmp_path / "recall.json").read_text())
  assert saved.pop("written_by") == "vit_jax.zeroshot"
  assert sorted(saved) == sorted(f"{way}/recall@{k}" for way in ("image_to_text",
                                                                 "text_to_image")
                                 for k in (1, 5, 10))
  assert {k: metrics[f"retrieval/file/{k}"] for k in saved} == saved
  # The file as a dataset, read on the mesh in batches: the same pixels and captions.
  for key, value in saved.items():
    assert abs(metrics[f"retrieval/split/{key}"] - value) <= 2 / IMAGES, key


@pytest.mark.parametrize("settings, message", [
    (dict(), "give captions \\(an 'IMAGE<TAB>CAPTION' file\\) or dataset"),
    (dict(captions="c.tsv", dataset="digits"), "one of them"),
    (dict(captions="/no/such/captions.tsv"), "captions=/no/such/captions.tsv: no such file"),
    (dict(dataset="digits", k=5), "config.evals.r has unknown key\\(s\\) k; its keys are"),
])
def test_settings_refused_in_one_line(settings, message):
  with pytest.raises(errors.InvalidInput, match=message):
    caption_retrieval.check(config_with({"r": dict(type="retrieval", **settings)}), False)


def test_refused_on_a_run_that_embeds_no_texts_and_on_a_split_without_captions(pair):
  with pytest.raises(errors.InvalidInput, match="config.objective='classification' does not"):
    caption_retrieval.check(config_with({"r": dict(type="retrieval", dataset="digits")},
                                        objective="classification"), True)
  with pytest.raises(errors.InvalidInput, match="the test split of digits has no captions"):
    build(config_with({"r": dict(type="retrieval", dataset="digits")}), pair)
