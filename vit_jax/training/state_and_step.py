"""The train state and the compiled train step of a config, placed on a mesh: built here
once, for the main job (vit_jax.training.loop) and the benchmark (vit_jax.benchmark --config), so
the benchmark times exactly the step that trains (objective, Polyak, accumulation,
optimizer, shardings)."""

import dataclasses
from typing import Any, Callable

import jax
import jax.numpy as jnp
import ml_collections
import optax

from vit_jax.training import lora_adapters, objectives, optim, param_groups, sharding, update_step


@dataclasses.dataclass(frozen=True)
class Trainer:
  """optimizer; abstract_state (shapes) and state_shardings; init(rng) and
  from_params(host params) -> a placed state at step 0; step(state, batch, rng) ->
  (state, metrics), jitted with the state donated."""
  optimizer: optax.GradientTransformation
  abstract_state: Any
  state_shardings: Any
  init: Callable
  from_params: Callable
  step: Callable


def build(config: ml_collections.ConfigDict, module, mesh,
          objective: objectives.Objective = None) -> Trainer:
  """The state and step that `config` trains `module` with on `mesh`."""
  objective = objective or objectives.get(config)
  module = lora_adapters.wrap(module, config)
  trained = lora_adapters.trained_regex(config)  # LoRA: only the adapters and the head train
  optimizer = optim.make_optimizer(config, trained)
  polyak = config.polyak_decay > 0
  image_shape = (1, config.pp.crop, config.pp.crop, 3)

  def state_of(params):
    return update_step.create_train_state(params, optimizer, polyak=polyak)

  def init_state(rng):
    return state_of(module.init(rng, jnp.zeros(image_shape, jnp.float32))["params"])

  abstract_state = jax.eval_shape(init_state, jax.random.PRNGKey(0))
  state_shardings = sharding.param_shardings(abstract_state, mesh)
  batch_sharding, replicated = sharding.batch_sharding(mesh), sharding.replicated(mesh)
  batch_loss = param_groups.without_frozen_gradients(objective.make_batch_loss(module, config),
                                                     config, trained)
  step = jax.jit(
      sharding.on_mesh(mesh, update_step.make_train_step(batch_loss, optimizer, config)),
      in_shardings=(state_shardings, batch_sharding, replicated),
      out_shardings=(state_shardings, replicated), donate_argnums=(0,))
  place = jax.jit(state_of, out_shardings=state_shardings)
  return Trainer(
      optimizer=optimizer, abstract_state=abstract_state, state_shardings=state_shardings,
      init=jax.jit(init_state, out_shardings=state_shardings),
      from_params=lambda params: place(sharding.put(lora_adapters.with_adapters(params, config),
                                                    state_shardings.params)),
      step=step)
