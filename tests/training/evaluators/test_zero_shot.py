"""The zero-shot evaluator of image-text runs: on a folder its top-1 is python -m
vit_jax.zeroshot's on the saved file (same reading, prompts, class embeddings); on the
in-memory digits (read on the mesh with the eval preprocessing) it scores the same pixels;
its schedule, subsets and one-line refusals."""

import json
import types

import jax
import ml_collections
import pytest
from absl import flags

import two_tower_helpers
from vit_jax import zeroshot
from vit_jax.base import errors
from vit_jax.data import text_tokens
from vit_jax.training import config_defaults, sharding
from vit_jax.training.evaluators import zero_shot

TEMPLATES = "a photo of the number {}.|{}"


@pytest.fixture(name="pair", scope="module")
def fixture_pair(tmp_path_factory):
  return two_tower_helpers.save_digits_pair(tmp_path_factory.mktemp("pair"))


def config_with(evals, objective="contrastive"):
  config = config_defaults.demo_config()
  config.objective, config.loader = objective, "grain"
  config.pp.resize, config.pp.crop = 36, 32
  config.batch_eval, config.eval_every = 32, 5
  config.evals = ml_collections.ConfigDict(evals)
  return config


def build(config, pair):
  """(evaluators, state) of config's zeroshot instances over the pair, params on the mesh
  as a run holds them."""
  module, params, path, _ = pair
  zero_shot.check(config, False)
  mesh = sharding.make_mesh({"data": -1})
  dataset = types.SimpleNamespace(text_tokenizer=text_tokens.TokenizerSpec(path[:-4] + ".txt",
                                                                           max_len=8))
  state = types.SimpleNamespace(eval_params=jax.device_put(params, sharding.replicated(mesh)))
  return zero_shot.build(config, module, mesh, dataset, None), state


def run_zeroshot(monkeypatch, *argv):
  values = flags.FlagValues()
  zeroshot.define_flags(values)
  monkeypatch.setattr(zeroshot, "FLAGS", values)
  zeroshot.main(values(["zeroshot", *argv]), values)


def test_folder_top1_is_zeroshots_on_the_saved_file(pair, monkeypatch, tmp_path):
  _, _, path, folder = pair
  words = list(two_tower_helpers.DIGIT_WORDS)
  settings = dict(type="zeroshot", class_names=words, templates=TEMPLATES)
  config = config_with({"folder": dict(settings, dataset=folder),  # its test/ folder
                        "digits": dict(settings, dataset="digits")})
  evaluators, state = build(config, pair)
  metrics = {k: v for e in evaluators for k, v in e.run(state, step=5).items()}
  assert sorted(metrics) == ["zeroshot/digits/top1", "zeroshot/folder/top1"]
  run_zeroshot(monkeypatch, f"--checkpoint={path}", f"--folder={folder}/test",
               "--classes=" + ",".join(words), f"--templates={TEMPLATES}",
               f"--json={tmp_path / 'top1.json'}")
  saved = json.loads((tmp_path / "top1.json").read_text())
  assert saved["images"] == 300
  assert metrics["zeroshot/folder/top1"] == saved["top1"]
  # The in-memory split, read on the mesh in batches of another size: the same pixels.
  assert abs(metrics["zeroshot/digits/top1"] - saved["top1"]) <= 2 / 300


def test_schedule_names_and_an_even_subset(pair):
  folder = pair[3]
  config = config_with({"few": dict(type="zeroshot", dataset=folder, max_examples=30,
                                    every_steps=7),
                        "all": dict(type="zeroshot", dataset=folder)})
  (everything, few), _ = build(config, pair)
  assert few.class_names == [str(d) for d in range(10)]  # the folders' names
  assert len(few.paths) == 30 and sorted(set(few.labels)) == list(range(10))
  assert len(few.templates) == 81  # clip_paper
  assert [s for s in range(1, 23) if few.due(s, 22)] == [7, 14, 21, 22]
  assert [s for s in range(1, 12) if everything.due(s, 11)] == [5, 10, 11]  # eval_every


@pytest.mark.parametrize("settings, message", [
    (dict(dataset="digits", shots=5), "config.evals.z has unknown key\\(s\\) shots; its keys"),
    (dict(), "config.evals.z.dataset is missing"),
    (dict(dataset="digits", templates="a photo"), "exactly one {} for the class name"),
    (dict(dataset="digits", templates="clip_worst"), "or a named set: clip_paper"),
    (dict(dataset="digits", class_names="zero,one"), "class_names='zero,one' must be None"),
    (dict(dataset="digits", max_examples=0), "max_examples=0 must be None \\(all\\) or >= 1"),
    (dict(dataset="digits", every_steps=0), "every_steps=0 must be None"),
])
def test_settings_refused_in_one_line(settings, message):
  with pytest.raises(errors.InvalidInput, match=message):
    zero_shot.check(config_with({"z": dict(type="zeroshot", **settings)}), False)


def test_a_run_that_embeds_no_texts_is_refused():
  with pytest.raises(errors.InvalidInput, match="config.objective='classification' does not "
                     "embed: drop it, or train with config.objective='contrastive'"):
    zero_shot.check(config_with({"z": dict(type="zeroshot", dataset="digits")},
                                objective="classification"), True)


def test_data_mistakes_are_named_when_built(pair, tmp_path):
  (tmp_path / "train" / "cat").mkdir(parents=True)
  with pytest.raises(errors.InvalidInput, match=f"{tmp_path} has no test/ folder"):
    build(config_with({"z": dict(type="zeroshot", dataset=str(tmp_path))}), pair)
  with pytest.raises(errors.InvalidInput, match="class_names has 2 names for the dataset's 10 "
                     "classes"):
    build(config_with({"z": dict(type="zeroshot", dataset="digits",
                                 class_names=["zero", "one"])}), pair)
