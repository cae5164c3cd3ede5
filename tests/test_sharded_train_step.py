"""A train step sharded over 8 (simulated) devices computes what one device computes.

The comparison runs in a subprocess, because the device count is fixed when jax starts.
"""

import subprocess
import sys

import numpy as np
import pytest

import gc_tuning
from helpers import subprocess_env

LAYOUTS = {"data8": {"data": 8}, "data4_fsdp2": {"data": 4, "fsdp": 2},
           "data2_tensor4": {"data": 2, "tensor": 4}}
SCANNED = {"data4_fsdp2_scan": LAYOUTS["data4_fsdp2"],
           "data2_tensor4_scan": LAYOUTS["data2_tensor4"]}
# FP8 dense layers (vit_jax.models.fp8): its per-tensor scales are global maxima, so a
# sharded step quantizes as one device does. Not the fsdp layout: XLA's CPU backend
# (jax 0.10.2) fails to JIT one of its FP8 convert fusions under
# --xla_cpu_max_isa=SSE4_2 ("Failed to materialize symbols"), a CPU-only compiler fault.
FP8 = {"one_fp8": {"data": 1}, "data8_fp8": LAYOUTS["data8"],
       "data2_tensor4_fp8": LAYOUTS["data2_tensor4"]}


def run_layouts(results_path):
  """Runs one step per layout; saves the loss, the new params and their specs per layout
  (an npz: name/loss, name/mlp_spec, name/params/i) to results_path."""
  import jax
  import jax.numpy as jnp
  import ml_collections
  from vit_jax.models import encoder_blocks
  from vit_jax.models import family_registry
  from vit_jax.training import optim, sharding, update_step
  from vit_jax.training.objectives import classification

  tiny = dict(num_classes=8, patch_size=8, hidden_size=128, mlp_dim=512, num_heads=4,
              num_layers=2)
  module = family_registry.create_model("ViT-Ti_16", **tiny)
  scanned = family_registry.create_model("ViT-Ti_16", scan_layers=True, **tiny)
  fp8 = family_registry.create_model("ViT-Ti_16", fp8=True, **tiny)
  config = ml_collections.ConfigDict(dict(
      optimizer="sgd", momentum=0.9, optim_dtype="float32", base_lr=0.1, warmup_steps=0,
      total_steps=10, decay_type="cosine", grad_norm_clip=1.0, weight_decay=0.0,
      adam_b1=0.9, adam_b2=0.999, accum_steps=2, loss="softmax_xent", label_smoothing=0.0))
  optimizer = optim.make_optimizer(config)
  rng = jax.random.PRNGKey(0)
  batch = {"image": jax.random.uniform(rng, (16, 32, 32, 3), minval=-1, maxval=1),
           "label": jnp.arange(16) % 8}

  @jax.jit  # one program, not one per operation of an eager init
  def init(rng, images):
    params = module.init(rng, images)["params"]
    params["head"]["kernel"] = jax.random.normal(rng, params["head"]["kernel"].shape) * 0.1
    return params
  params = jax.device_get(init(rng, batch["image"][:1]))
  # The start states on the host, placed on each layout below (no program per layout).
  start = jax.jit(lambda p: update_step.create_train_state(p, optimizer))
  host_states = {scan: jax.device_get(start(encoder_blocks.to_scan_layout(params) if scan
                                            else params)) for scan in (False, True)}
  results = {}
  for name, layout in {"one": {"data": 1}, **LAYOUTS, **SCANNED, **FP8}.items():
    devices = jax.devices()[:1] if name.startswith("one") else jax.devices()
    mesh = sharding.make_mesh(layout, devices)
    scan = name in SCANNED
    model = scanned if scan else fp8 if name in FP8 else module
    step = update_step.make_train_step(classification.make_batch_loss(model, config), optimizer,
                                      config)
    state_sharding = sharding.param_shardings(host_states[scan], mesh)
    state = jax.device_put(host_states[scan], state_sharding)
    jitted = jax.jit(step, in_shardings=(state_sharding, sharding.batch_sharding(mesh),
                                         sharding.replicated(mesh)),
                     out_shardings=(state_sharding, sharding.replicated(mesh)))
    new_state, metrics = jitted(state, jax.device_put(batch, sharding.batch_sharding(mesh)),
                                rng)
    encoder = new_state.params["Transformer"]
    block = encoder["encoderblock" if scan else "encoderblock_0"]
    kernel = block["MlpBlock_3"]["Dense_0"]["kernel"]
    results[f"{name}/loss"] = np.asarray(metrics["loss"])
    results[f"{name}/mlp_spec"] = np.asarray(str(kernel.sharding.spec))
    leaves = jax.tree.leaves(encoder_blocks.to_block_layout(jax.device_get(new_state.params)))
    results.update({f"{name}/params/{i}": leaf for i, leaf in enumerate(leaves)})
  np.savez(results_path, **results)


@pytest.fixture(name="results", scope="module")
def fixture_results(tmp_path_factory):
  """One step per layout, in one process with 8 devices: {name/loss, ...}."""
  results_path = tmp_path_factory.mktemp("layouts") / "results.npz"
  out = subprocess.run([sys.executable, __file__, str(results_path)],
                       env=subprocess_env(devices=8), capture_output=True, text=True, timeout=600)
  assert out.returncode == 0, out.stderr[-3000:]
  with np.load(results_path) as saved:
    return {key: saved[key] for key in saved.files}


def test_sharded_layouts_match_one_device(results):
  names = [*LAYOUTS, *SCANNED]
  one_params = [key for key in results if key.startswith("one/params/")]
  assert one_params and all(f"{name}/loss" in results for name in names)
  for name in names:
    np.testing.assert_allclose(results[f"{name}/loss"], results["one/loss"], rtol=1e-6,
                               err_msg=name)
    for key in one_params:
      np.testing.assert_allclose(results[key.replace("one/", f"{name}/", 1)], results[key],
                                 rtol=1e-5, atol=1e-6, err_msg=f"{name}: {key}")
  specs = {name: str(results[f"{name}/mlp_spec"]) for name in names}
  assert specs["data8"] == "P(None, None)"
  assert specs["data4_fsdp2"] == "P(None, 'fsdp')"
  assert specs["data2_tensor4"] == "P(None, 'tensor')"
  # nn.scan-stacked blocks: the depth axis stays whole, the rules shift one dimension.
  assert specs["data4_fsdp2_scan"] == "P(None, None, 'fsdp')"
  assert specs["data2_tensor4_scan"] == "P(None, None, 'tensor')"


def test_fp8_step_shards_like_one_device(results):
  """FP8 on sharded kernels: the loss as on one device (the scales are global), the same
  parameter shardings, and a first step close to the float32 one (FP8 rounding only)."""
  for name in FP8:
    assert np.isfinite(results[f"{name}/loss"])
    np.testing.assert_allclose(results[f"{name}/loss"], results["one_fp8/loss"], rtol=1e-4,
                               err_msg=name)
  assert str(results["data8_fp8/mlp_spec"]) == "P(None, None)"
  assert str(results["data2_tensor4_fp8/mlp_spec"]) == "P(None, 'tensor')"
  np.testing.assert_allclose(results["one_fp8/loss"], results["one/loss"], rtol=0.05)


if __name__ == "__main__":
  gc_tuning.fewer_collections()
  run_layouts(sys.argv[1])
