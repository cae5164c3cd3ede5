"""vit_jax.training.state_and_step: what a run's step is made of is built once, in build(),
and handed on in the Trainer (the loop, the plan and the benchmark rebuild none of it)."""

import ast
import pathlib

import jax
import jax.numpy as jnp
import ml_collections
import pytest
from flax import traverse_util

from conftest import REPO, tiny_model
from test_update_step import make_batch, make_config
from vit_jax.training import lora_adapters, optim, sharding, state_and_step

PACKAGE = pathlib.Path(REPO) / "vit_jax"


def lora_run_config() -> ml_collections.ConfigDict:
  config = make_config(lora=dict(rank=2, alpha=4.0, dropout=0.0,
                                 targets=lora_adapters.DEFAULT_TARGETS),
                       seed=0, lr_mults=None, layer_decay=None, freeze=None, freeze_steps=None,
                       pp=dict(crop=16), model_name="ViT-B_16")
  return config


def counting(monkeypatch, module, name) -> list:
  """Replaces module.name with a wrapper that records each call."""
  calls, original = [], getattr(module, name)

  def counted(*args, **kwargs):
    calls.append(args)
    return original(*args, **kwargs)

  monkeypatch.setattr(module, name, counted)
  return calls


def test_build_parses_lora_and_the_schedule_once_and_hands_them_on(monkeypatch):
  parses = counting(monkeypatch, lora_adapters, "settings")
  schedules = counting(monkeypatch, optim, "make_schedule")
  mesh = sharding.make_mesh({"data": -1})
  run = state_and_step.build(lora_run_config(), tiny_model(5), mesh)
  assert len(parses) == 1 and len(schedules) == 1
  assert isinstance(run.module, lora_adapters.Merging) and run.lora.rank == 2
  assert run.trained == lora_adapters.TRAINED
  assert run.batch_sharding == sharding.batch_sharding(mesh)
  assert run.replicated == sharding.replicated(mesh)
  state = run.init(jax.random.PRNGKey(0))  # the adapters are in the state it makes
  assert any(name.endswith(lora_adapters.A) for name in
             traverse_util.flatten_dict(state.params, sep="/"))
  assert len(parses) == 1 and len(schedules) == 1


def test_runs_differing_only_in_length_or_rate_compile_one_train_step():
  """The schedule's numbers are arguments of the step: a sweep over rates or a longer rerun
  compiles nothing new. Its decay type stays part of the program."""
  mesh = sharding.make_mesh({"data": -1})

  def program(**schedule):
    config = make_config(seed=0, pp={"crop": 16}, model_name="ViT-B_16", **schedule)
    run = state_and_step.build(config, tiny_model(5), mesh)
    state = jax.eval_shape(run.init, jax.random.PRNGKey(0))
    batch = jax.eval_shape(make_batch)
    return run.step.lower(state, batch, jax.random.PRNGKey(1), run.placed_schedule()).as_text()

  base = program(base_lr=0.03, warmup_steps=2, total_steps=10, decay_type="cosine")
  assert program(base_lr=0.1, warmup_steps=0, total_steps=500, decay_type="cosine") == base
  assert program(base_lr=0.03, warmup_steps=2, total_steps=10, decay_type="linear") != base


def test_without_lora_the_module_is_the_one_given():
  config = make_config(seed=0, lr_mults=None, layer_decay=None, freeze=None,
                       freeze_steps=None, pp=dict(crop=16), model_name="ViT-B_16")
  module = tiny_model(5)
  run = state_and_step.build(config, module, sharding.make_mesh({"data": -1}))
  assert run.module is module and run.lora is None and run.trained == ""


def callers_of(function: str) -> list:
  """Modules of the package that call `<module>.<function>(...)` by attribute."""
  found = []
  for path in PACKAGE.rglob("*.py"):
    tree = ast.parse(path.read_text(encoding="utf-8"))
    if any(isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
           and isinstance(node.func.value, ast.Name) and f"{node.func.value.id}."
           f"{node.func.attr}" == function for node in ast.walk(tree)):
      found.append(str(path.relative_to(PACKAGE)))
  return sorted(found)


def test_the_settings_are_parsed_in_one_place():
  """Everything else reads the Trainer's: the loop's LoRA export, its parameter table, the
  plan's eval step (which must apply LoRA's module)."""
  assert callers_of("lora_adapters.settings") == ["training/state_and_step.py"]
  assert callers_of("lora_adapters.wrap") == ["training/state_and_step.py"]


def test_out_of_device_memory_is_one_line_naming_the_batch_and_budget():
  """XLA's real RESOURCE_EXHAUSTED, from allocating 2^48 bytes (past any machine's address
  space, so it fails however the OS overcommits): one DoesNotFit line with the sizes."""
  config = ml_collections.ConfigDict(dict(batch=8, accum_steps=2, pp=dict(max_patches=4096)))
  with pytest.raises(state_and_step.DoesNotFit) as raised:
    with state_and_step.within_device_memory(config):
      jax.block_until_ready(jnp.ones((2**46,), jnp.float32))
  message = str(raised.value)
  devices = f"{jax.device_count()} {jax.devices()[0].device_kind} device(s)"
  assert message.startswith("the train step does not fit device memory with config.batch=8 in 2 "
                            f"micro-batches, config.pp.max_patches=4096 on {devices} "
                            "(RESOURCE_EXHAUSTED: Out of memory allocating 281474976710656 bytes")
  assert message.endswith("pass a smaller --config.pp.max_patches or --config.batch; "
                          f"{state_and_step.PLAN_WITH_THE_RUNS_FLAGS} says what fits")
  assert "\n" not in message


def test_other_runtime_errors_pass_unchanged():
  config = ml_collections.ConfigDict(dict(batch=8, pp=dict()))
  with pytest.raises(jax.errors.JaxRuntimeError, match="INVALID_ARGUMENT"):
    with state_and_step.within_device_memory(config):
      raise jax.errors.JaxRuntimeError("INVALID_ARGUMENT: not a memory error")
