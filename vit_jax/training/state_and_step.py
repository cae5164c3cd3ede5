"""The train state and the compiled train step of a config, placed on a mesh: built here
once, for the main job (vit_jax.training.loop), the plan and the benchmark, so that they
compile and time exactly the step that trains (objective, Polyak, accumulation, optimizer,
shardings). What the step is made of (the LoRA settings, the schedule, the batch and
replicated shardings) is built once here and handed on in the Trainer, not rebuilt by its
users."""

import contextlib
import dataclasses
from typing import Any, Callable, Iterator, Optional

import jax
import ml_collections
import optax

from vit_jax.base import errors
from vit_jax.training import lora_adapters, objectives, optim, param_groups, sharding, update_step


@dataclasses.dataclass(frozen=True)
class Trainer:
  """module (with LoRA's adapters where config.lora asks: what evaluators apply too), lora
  (its settings or None) and trained (the regex of what trains, "" for everything);
  optimizer; abstract_state (shapes) and state_shardings; batch_sharding and replicated;
  init(rng) and from_params(host params) -> a placed state at step 0;
  step(state, batch, rng, schedule) -> (state, metrics), jitted with the state donated;
  schedule: the learning-rate schedule's numbers on the host
  (vit_jax.training.optim.schedule_numbers), which step takes as arguments, placed
  (placed_schedule()), rather than as constants of its program."""
  module: Any
  lora: Optional[lora_adapters.Settings]
  trained: str
  optimizer: optax.GradientTransformation
  abstract_state: Any
  state_shardings: Any
  batch_sharding: Any
  replicated: Any
  init: Callable
  from_params: Callable
  step: Callable
  schedule: Any

  def placed_schedule(self):
    return sharding.put(self.schedule, jax.tree.map(lambda _: self.replicated, self.schedule))


def build(config: ml_collections.ConfigDict, module, mesh,
          objective: objectives.Objective = None) -> Trainer:
  """The state and step that `config` trains `module` (as created, without adapters) with on
  `mesh`."""
  objective = objective or objectives.get(config)
  lora = lora_adapters.settings(config)
  module = lora_adapters.wrap(module, lora)
  trained = lora_adapters.trained_regex(lora)  # LoRA: only the adapters and the head train
  optimizer = optim.make_optimizer(config, trained)  # its state does not depend on the schedule
  polyak = config.polyak_decay > 0
  sample = objectives.sample_inputs(objective, config, getattr(module, "patch_size", None))

  def state_of(params):
    return update_step.create_train_state(params, optimizer, polyak=polyak)

  def init_state(rng):
    return state_of(module.init(rng, *sample)["params"])

  abstract_state = jax.eval_shape(init_state, jax.random.PRNGKey(0))
  state_shardings = sharding.param_shardings(abstract_state, mesh)
  batch_sharding, replicated = sharding.batch_sharding(mesh), sharding.replicated(mesh)
  batch_loss = param_groups.without_frozen_gradients(objective.make_batch_loss(module, config),
                                                     config, trained)

  def train_step(state, batch, rng, schedule_numbers):
    schedule = optim.make_schedule(config, schedule_numbers)
    step_with = update_step.make_train_step(
        batch_loss, optim.make_optimizer(config, trained, schedule), config, schedule)
    return step_with(state, batch, rng)

  step = jax.jit(sharding.on_mesh(mesh, train_step),
                 in_shardings=(state_shardings, batch_sharding, replicated, replicated),
                 out_shardings=(state_shardings, replicated), donate_argnums=(0,))
  place = jax.jit(state_of, out_shardings=state_shardings)
  with_adapters = lambda params: lora_adapters.with_adapters(params, lora, config.seed)
  return Trainer(
      module=module, lora=lora, trained=trained, optimizer=optimizer,
      abstract_state=abstract_state, state_shardings=state_shardings,
      batch_sharding=batch_sharding, replicated=replicated,
      init=jax.jit(init_state, out_shardings=state_shardings),
      from_params=lambda params: place(sharding.put(with_adapters(params),
                                                    state_shardings.params)),
      step=step, schedule=optim.schedule_numbers(config))


# What a DoesNotFit names where the command line that ran is not known.
PLAN_WITH_THE_RUNS_FLAGS = "python -m vit_jax.plan with this run's --config flags"


class DoesNotFit(errors.InvalidInput):
  """The train step ran out of device memory. what: the shortfall and its fix;
  plan: the command that finds what fits (vit_jax.main names the run's own flags)."""

  def __init__(self, what: str, plan: str = PLAN_WITH_THE_RUNS_FLAGS):
    super().__init__(f"{what}; {plan} says what fits")
    self.what = what


@contextlib.contextmanager
def within_device_memory(config: ml_collections.ConfigDict) -> Iterator[None]:
  """XLA's RESOURCE_EXHAUSTED (at compilation, or allocating the step's buffers) as one
  DoesNotFit line naming config.batch and the NaFlex budget, instead of a
  traceback: a size the user chose, and the plan says which one fits."""
  try:
    yield
  except jax.errors.JaxRuntimeError as e:
    if "RESOURCE_EXHAUSTED" not in str(e):
      raise
    xla = " ".join(str(e).split())
    budget = config.get("pp", {}).get("max_patches")
    sizes = f"config.batch={config.batch}" + (
        f" in {config.accum_steps} micro-batches" if config.get("accum_steps", 1) > 1 else "")
    sizes += f", config.pp.max_patches={budget}" if budget else ""
    devices = f"{jax.device_count()} {jax.devices()[0].device_kind} device(s)"
    smaller = "--config.pp.max_patches or --config.batch" if budget else "--config.batch"
    raise DoesNotFit(f"the train step does not fit device memory with {sizes} on {devices} "
                     f"({xla[:200]}{'...' if len(xla) > 200 else ''}): pass a smaller "
                     f"{smaller}") from e
