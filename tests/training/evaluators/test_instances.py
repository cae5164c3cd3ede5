"""Evaluators declared by type in config.evals: several instances of one kind in one config,
config.fewshot as the instance named 'fewshot', and the one-line refusals of the static
checks (an unknown type, a fewshot instance's mistakes)."""

import types

import jax
import ml_collections
import pytest

from conftest import random_params, tiny_model
from helpers import demo_config
from vit_jax.base import errors
from vit_jax.data.tf_stack import tf_pipeline
from vit_jax.training import evaluators, loop, objectives, sharding
from vit_jax.training.evaluators import classification, fewshot_probes


def config_with(evals, **fewshot):
  """The demo config (digits, 16 px) with these config.evals and config.fewshot keys."""
  config = demo_config()
  with config.unlocked():
    config.evals = ml_collections.ConfigDict(evals)
  config.fewshot.update(fewshot)
  return config


def probes(**settings):
  return {"type": "fewshot", "datasets": ("digits",), "seeds": 1, "batch_size": 256, **settings}


def test_two_instances_of_each_kind_are_built_and_measured_apart():
  """Two classification sets (one typed, one as older configs write them) and two fewshot
  instances, each with its own settings: one classification evaluator scores every set,
  each fewshot instance is an evaluator of its own with its name on its metrics."""
  config = config_with({"again": {"type": "classification", "dataset": "digits"},
                        "twice": {"dataset": "digits", "split": "test"},
                        "probes": probes(shots=(1,), every_steps=2),
                        "more": probes(shots=(1, 5))})
  objective = objectives.get(config)
  evaluators.check_all(config, objective)
  module = tiny_model(num_classes=10)
  mesh = sharding.make_mesh({"data": -1})
  built = evaluators.build_all(config, module, mesh, tf_pipeline.open_dataset(config), objective)
  assert [type(e) for e in built] == [classification.Evaluator] + [fewshot_probes.Evaluator] * 2
  assert [e.due(2, 10) for e in built] == [False, False, True]  # eval_every 3; every_steps
  params = jax.device_put(random_params(module, 16), sharding.replicated(mesh))
  state = types.SimpleNamespace(eval_params=params, params=params, polyak=None)
  metrics = {}
  for evaluator in built:
    metrics.update(evaluator.run(state, step=2))
  assert {"more/digits_1shot", "more/digits_5shot", "probes/digits_1shot"} == {
      name for name in metrics if "shot" in name}
  assert metrics["probes/digits_1shot"] == metrics["more/digits_1shot"]  # same draws
  for name in ("again", "twice"):  # the digits' test split again: the same numbers
    assert metrics[f"eval/{name}/examples"] == 300
    assert metrics[f"eval/{name}/accuracy"] == metrics["eval/test/accuracy"]


def test_config_fewshot_is_the_instance_named_fewshot():
  """Its metrics keep their names (fewshot/<dataset>_<k>shot), beside typed instances whose
  left-out keys take config.fewshot's defaults."""
  config = config_with({"probes": {"type": "fewshot", "datasets": ("digits",)}},
                       datasets=("digits",), every_steps=4)
  declared = fewshot_probes.declared(config)
  assert [(i.name, i.key) for i in declared] == [("fewshot", "fewshot"),
                                                 ("probes", "evals.probes")]
  assert declared[0].settings.every_steps == 4 and declared[1].settings.every_steps == 1_000
  assert declared[1].settings.shots == config.fewshot.shots
  assert [i.name for i in fewshot_probes.declared(config_with({}))] == []  # off by default


def test_an_unknown_type_is_refused_in_one_line_before_anything_runs(tmp_path):
  config = config_with({"cap": {"type": "captioning", "dataset": "digits"}})
  with pytest.raises(errors.InvalidInput) as refused:
    loop.train_and_evaluate(config, str(tmp_path / "run"))
  assert str(refused.value) == ("config.evals.cap.type='captioning' is not an evaluator kind; "
                                "choose one of classification, fewshot, zeroshot, retrieval")
  assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("evals, fewshot, message", [
    ({"p": probes(shot=5)}, {}, "config.evals.p has unknown key\\(s\\) shot; its keys are type,"),
    ({"eval": probes()}, {}, "config.evals.eval: the name 'eval' is a metric group the run"),
    ({"p": {"type": "fewshot"}}, {}, "config.evals.p.datasets must list datasets to probe"),
    ({"p": probes(datasets="digits")}, {}, "config.evals.p.datasets must list datasets"),
    ({"p": probes(datasets=("a/digits", "b/digits/"))}, {},
     "config.evals.p.datasets names 'digits' twice"),
    ({}, {"datasets": ("digits", "digits")}, "^config.fewshot.datasets names 'digits' twice"),
    ({"fewshot": probes()}, {"datasets": ("digits",)},
     "config.fewshot.datasets and config.evals.fewshot both declare the probes named"),
])
def test_fewshot_mistakes_are_refused_by_the_static_checks(evals, fewshot, message):
  config = config_with(evals, **fewshot)
  with pytest.raises(errors.InvalidInput, match=message):
    evaluators.check_all(config, objectives.get(config))
