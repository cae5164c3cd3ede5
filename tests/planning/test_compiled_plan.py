"""vit_jax.planning.compiled_plan: the main job's steps compiled for TPU topologies on this CPU
machine."""

import jax
import pytest

import helpers
from vit_jax.base import errors
from vit_jax.data import device_batches
from vit_jax.data.tf_stack import tf_pipeline
from vit_jax.planning import compiled_plan, compiler_readings
from vit_jax.training import objectives, sharding, state_and_step

# Wide enough that FSDP splits its kernels (sharding.FSDP_MIN_SIZE), small enough to
# compile for a TPU in seconds.
WIDE = {"model.hidden_size": 256, "model.mlp_dim": 512, "model.num_heads": 4,
        "model.num_layers": 2}
MESHES = {"data": {"mesh.data": 8}, "fsdp": {"mesh.data": 1, "mesh.fsdp": -1},
          "tensor": {"mesh.data": 2, "mesh.tensor": 4},
          "loops": {"accum_steps": 4, "model.scan_layers": True, "model.num_layers": 3}}

pytest.importorskip("libtpu", reason="compiling for TPUs needs libtpu (the test extra)")


def config_of(**changes):
  return compiled_plan.with_overrides(helpers.demo_config(), **changes)


@pytest.fixture(name="v3_8", scope="module")
def fixture_v3_8():
  return compiler_readings.tpu_target("v3-8")


@pytest.fixture(name="reports", scope="module")
def fixture_reports(v3_8):
  """Plans of the wide model on a v3-8, by name of MESHES, made on first use."""
  made = {}

  def report(name):
    if name not in made:
      made[name] = compiled_plan.plan_steps(config_of(**{**WIDE, **MESHES[name]}), v3_8,
                                      num_classes=10)
    return made[name]
  return report


@pytest.mark.parametrize("mesh,per_device", [("data", 4), ("fsdp", 4), ("tensor", 16)])
def test_data_fsdp_and_tensor_meshes_compile_for_a_v3_8(reports, mesh, per_device):
  report = reports(mesh)
  assert report["fits"] and (report["devices"], report["chips"], report["cores"]) == (8, 4, 8)
  assert report["device_kind"] == "TPU v3" and report["per_device_batch"] == per_device
  train = report["train"]
  assert train["peak_bytes_per_device"] > train["state_bytes_per_device"] > 0
  assert "all-reduce" in {c["kind"] for c in train["collectives"]}  # gradients / partial sums
  assert train["estimated_img_per_sec"] > 0 and 0 < train["estimated_mfu"] < 1
  assert report["estimated_core_days"] == pytest.approx(
      report["estimated_hours"] * 8 / 24)  # v3-8: 8 TensorCores


def test_a_pod_slice_says_what_each_host_must_feed():
  """v3-32: 4 hosts of 8 cores; each host's pipeline loads a quarter of the batch and must
  deliver a quarter of the estimated img/s. One block: the depth changes none of this,
  and a shallower program compiles faster."""
  report = compiled_plan.plan_steps(config_of(batch=32, batch_eval=32, accum_steps=1,
                                              **{"model.num_layers": 1}),
                              compiler_readings.tpu_target("v3-32"), num_classes=10)
  assert (report["devices"], report["hosts"], report["per_host_batch"]) == (32, 4, 8)
  assert report["needed_img_per_sec_per_host"] == pytest.approx(
      report["train"]["estimated_img_per_sec"] / 4)


def test_fsdp_holds_an_eighth_of_the_big_tensors(reports):
  data, fsdp = reports("data")["train"], reports("fsdp")["train"]
  assert fsdp["state_bytes_per_device"] < data["state_bytes_per_device"] / 3
  assert "all-gather" in {c["kind"] for c in fsdp["collectives"]}


def test_accumulation_and_scanned_blocks_are_counted_in_full(reports):
  """XLA's cost analysis counts a loop body once; the plan counts the whole step: four
  micro-batches of three scanned blocks, priced from twins of one and two blocks, against
  the analytic count as the plain two-block step is."""
  plain, looped = reports("data"), reports("loops")
  assert looped["per_device_micro_batch"] == 1 and looped["accum_steps"] == 4
  for step in ("train", "eval"):
    assert looped[step]["flops_vs_analytic"] == pytest.approx(
        plain[step]["flops_vs_analytic"], rel=0.02)
  # Without the correction the looped step would count one micro-batch of four, and one
  # of three blocks: under a third of the plain step's FLOPs per image.
  assert looped["train"]["estimated_step_seconds"] > 0.9 * plain["train"][
      "estimated_step_seconds"]  # 1.5x the blocks, the same images per step


def test_accumulation_alone_is_priced_on_the_step_itself(reports, v3_8):
  """With accumulation but no scanned blocks, the compiled step (one micro-batch counted)
  and the update compiled alone give the whole step, no twin. Counted once, the loop would
  be a quarter of the plain step; counted in full it is a little more than the plain step:
  the real step also sums four micro-batches' gradients (5% here, at one image per core
  of a tiny model; 0.02% for ViT-S/16 on a v3-8)."""
  plain = reports("data")
  looped = compiled_plan.plan_steps(config_of(**WIDE, **MESHES["data"], accum_steps=4), v3_8,
                              num_classes=10)
  ratio = looped["train"]["gflop_per_image"] / plain["train"]["gflop_per_image"]
  assert 0.98 < ratio < 1.1, ratio
  assert looped["train"]["estimated_step_seconds"] > 0.9 * plain["train"][
      "estimated_step_seconds"]


def test_the_plan_compiles_the_program_the_main_job_runs():
  """Lowered on the pipeline's real batches and state, main's steps are the plan's."""
  config = helpers.demo_config()
  mesh = sharding.make_mesh(config.mesh)
  programs = compiled_plan.build_programs(config, mesh, num_classes=10)
  objective = objectives.get(config)
  module, _ = objective.create_model(config, 10, load_pretrained=False)
  run = state_and_step.build(config, module, mesh, objective)
  dataset = tf_pipeline.open_dataset(config)
  to_global = lambda batch: device_batches.to_global(batch, sharding.batch_sharding(mesh))
  batch = to_global(next(iter(dataset.train_batches(
      batch_size=config.batch, start_step=0, num_steps=1, seed=0, process_index=0,
      process_count=1))))
  state = run.init(jax.random.PRNGKey(0))
  fn, args = programs.train
  assert fn.lower(*args).as_text() == run.step.lower(state, batch, jax.random.PRNGKey(1),
                                                     run.placed_schedule()).as_text()
  eval_batch = to_global(next(iter(dataset.eval_batches(
      batch_size=config.batch_eval, process_index=0, process_count=1))))
  eval_fn, eval_args = programs.eval
  assert eval_fn.lower(*eval_args).as_text() == eval_fn.lower(state.params,
                                                              eval_batch).as_text()


def test_without_a_tpu_the_local_devices_are_planned():
  """The suite's shared demo program on this CPU: memory against the host's, no estimate."""
  report = compiled_plan.plan_steps(helpers.demo_config(), compiler_readings.local_target(),
                                    num_classes=10)
  assert report["fits"] and report["slice"] == "local" and report["chips"] is None
  assert 0 < report["train"]["peak_bytes_per_device"] < report["hbm_bytes_per_device"]
  assert report["train"]["estimated_img_per_sec"] is None
  assert report["train"]["gflop_per_image"] > 0 and report["estimated_core_days"] is None


class _Analysed:
  """What a compiled program answers: libtpu 0.0.42's cost analysis as returned."""

  def __init__(self, analysis):
    self.analysis = analysis

  def cost_analysis(self):
    return self.analysis


def test_a_negative_time_estimate_is_no_estimate():
  """libtpu prices some float32 programs on v4, v5e and v6e at a negative optimal_seconds
  (vit_s32.py's train step on a v5e-8: -0.44 s); no img/s, MFU or hours come from it."""
  negative = compiler_readings.cost(_Analysed([{"flops": 2e12, "optimal_seconds": -0.44}]))
  assert negative == {"flops": 2e12, "bytes": None, "seconds": None}
  assert compiler_readings.cost(_Analysed({"optimal_seconds": 0.5}))["seconds"] == 0.5
  v5e_8 = compiler_readings.tpu_target("v5e-8")
  # pylint: disable-next=protected-access
  speed = compiled_plan._speed(negative, 512, None, v5e_8)
  assert speed["estimated_img_per_sec"] is None and speed["estimated_mfu"] is None


def test_a_gpu_without_one_is_a_compile_only_tpu_chip_under_its_memory(monkeypatch):
  """--gpu on a machine without a GPU: one TPU v5p chip compiles, limited to the memory a
  JAX process takes of the GPU (XLA_PYTHON_CLIENT_MEM_FRACTION, default 0.75); its MFU is
  against the GPU's peak, and the TPU compiler's time is no GPU's: none is estimated."""
  monkeypatch.delenv("XLA_PYTHON_CLIENT_MEM_FRACTION", raising=False)
  h100 = compiler_readings.gpu_target("H100")
  assert h100.num_devices == 1 and h100.devices[0].platform == "tpu" and h100.note
  assert h100.device_kind == "NVIDIA H100 80GB" and h100.peak_flops_per_device == 989e12
  assert h100.hbm_bytes_per_device == int(81_559 * 2**20 * 0.75) and not h100.prices_time
  assert compiler_readings.gpu_target("h100", 2**30).hbm_bytes_per_device == 2**30
  cost = {"flops": 1e12, "bytes": None, "seconds": 0.01}
  # pylint: disable-next=protected-access
  assert compiled_plan._speed(cost, 8, None, h100)["estimated_img_per_sec"] is None
  monkeypatch.setenv("XLA_PYTHON_CLIENT_MEM_FRACTION", ".9")
  with pytest.raises(errors.InvalidInput, match="more than the 95.7 GiB of the TPU chip"):
    compiler_readings.gpu_target("h200")  # 126 GiB usable
  monkeypatch.setenv("XLA_PYTHON_CLIENT_MEM_FRACTION", "most")
  with pytest.raises(errors.InvalidInput, match="MEM_FRACTION=most is not a number"):
    compiler_readings.gpu_target("a100-80gb")
