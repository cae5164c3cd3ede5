"""The benchmark's step timing in CI-sized form: it runs, and the FLOP count agrees with
XLA's."""

import jax
import pytest

from vit_jax import benchmark
from vit_jax.models import family_registry
from vit_jax.planning import step_timing
from vit_jax.training import objectives, sharding


def test_b16_training_flops_match_the_published_count():
  module = family_registry.create_model("ViT-B_16", num_classes=1000)
  forward = family_registry.geometry(module).flops_per_image(module, 224)
  assert 3 * forward / 1e9 == pytest.approx(105.4, abs=0.1)


@pytest.fixture(name="train_result", scope="module")
def fixture_train_result():
  """The train smoke run, which measures the device's peak itself (a large matmul)."""
  return step_timing.run("ViT-Ti_16", "train", batch=2, image_size=64, steps=2, num_layers=2)


@pytest.mark.parametrize("mode", ["train", "infer"])
def test_smoke_run(train_result, mode):
  # inference against the peak the train run measured: the same number, measured once
  result = train_result if mode == "train" else step_timing.run(
      "ViT-Ti_16", mode, batch=2, image_size=64, steps=2, num_layers=2,
      peak_flops=train_result["peak_tflops_per_device"] * 1e12)
  assert result["img_per_sec"] > 0 and result["compile_s"] > 0
  assert 0 < result["mfu"] < 1 and result["mib_per_device"] > 0
  # Analytic matmul FLOPs vs XLA's count (which adds softmax, norms, optimizer).
  assert 0.7 < result["xla_gflop_per_image"] / result["gflop_per_image"] < 1.5


def test_config_times_the_step_that_trains_its_objective_with_polyak():
  """benchmark --config once built its own state, without the Polyak average, and minimised
  the classification loss whatever config.objective said: the state must carry the
  average, and the step's loss must be the configured objective's (here MPP)."""
  config = benchmark.load_config("configs/mpp.py:digits", [  # 1 block: the step compiles
      "--config.polyak_decay=0.9", "--config.batch=8", "--config.accum_steps=1",  # faster
      "--config.model.num_layers=1"])
  objective = objectives.get(config)
  module, _ = objective.create_model(config, 10, load_pretrained=False)
  mesh = sharding.make_mesh({"data": 1}, jax.devices()[:1])
  step, (state, batch, rng, schedule), _ = step_timing.step_function(module, "train", mesh, 8,
                                                                     config.pp.crop, config)
  assert state.polyak is not None
  params = jax.device_get(state.params)
  key = jax.random.fold_in(jax.random.fold_in(rng, 0), 0)  # step 0, micro-batch 0
  # jitted as the step is: eagerly, each op of the MPP loss compiles on its own (~8 s)
  expected = jax.jit(objective.make_batch_loss(module, config))(params, jax.device_get(batch),
                                                                key)
  state, step_metrics = step(state, batch, rng, schedule)
  assert float(step_metrics["loss"]) == pytest.approx(float(expected), rel=1e-5)
  assert state.polyak is not None
