"""Training objectives, chosen by `config.objective`: what the main job builds, minimises,
evaluates and exports.

  * classification (default): the VisionTransformer on the labels (vit_jax.train_step);
  * mpp: masked patch prediction, self-supervised (vit_jax.objectives.mpp); labels unused.

Every objective keeps the step signatures of vit_jax.train_step: train_step(state, batch,
rng) -> (state, metrics) and eval_step(params, batch) -> {'loss_sum', 'correct',
'examples'} sums; its model answers apply(..., representation=True) with the backbone's
features, so few-shot probes run whatever the objective.
"""

import dataclasses
from typing import Any, Callable, Optional

from vit_jax import errors, train_step
from vit_jax.objectives import mpp

DEFAULT = "classification"


@dataclasses.dataclass(frozen=True)
class Objective:
  """check(config) refuses settings early; create_model(config, model overrides) builds
  the module (None: the classifier, built by vit_jax.train.build_model, pretrained files
  included); make_train_step(module, optimizer, config) and make_eval_step(module,
  config) give the steps; export_params(host params) -> what params.npz holds."""
  name: str
  check: Callable[[Any], None]
  create_model: Optional[Callable[..., Any]]
  make_train_step: Callable[..., Callable]
  make_eval_step: Callable[..., Callable]
  export_params: Callable[[Any], Any]


OBJECTIVES = {
    "classification": Objective(
        "classification", check=lambda config: None, create_model=None,
        # Looked up at each call, not bound at import, so that wrappers of
        # train_step's functions (tests, user patches) reach the main job.
        make_train_step=lambda *args: train_step.make_train_step(*args),
        make_eval_step=lambda module, config: train_step.make_eval_step(module),
        export_params=lambda params: params),
    "mpp": Objective(
        "mpp", check=mpp.check_config, create_model=mpp.create_model,
        make_train_step=mpp.make_train_step, make_eval_step=mpp.make_eval_step,
        export_params=mpp.export_backbone),
}


def get(config) -> Objective:
  """The objective config.objective names (classification when the key is absent)."""
  name = config.get("objective", DEFAULT)
  if name not in OBJECTIVES:
    raise errors.InvalidInput(
        f"unknown config.objective={name!r}; choose one of {', '.join(OBJECTIVES)}")
  return OBJECTIVES[name]
