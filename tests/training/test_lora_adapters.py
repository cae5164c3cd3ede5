"""LoRA adapters (vit_jax.training.lora_adapters; the command vit_jax.lora): step 0 is the base
model, merged kernels move by rank <= r,
only adapters and the head train, adapters shard like their kernels, adapter dropout trains
the adapter path and evaluates merged, and a run on an 8-device mesh (data, fsdp and tensor
axes, adapter dropout) resumes exactly and writes a params.npz that `python -m vit_jax.lora`
rebuilds from the base checkpoint bit for bit."""

import json
import os
import subprocess
import sys

import jax
import numpy as np
import pytest
from flax import traverse_util

from conftest import REPO, init_params, tiny_model
from helpers import (demo_args, load_params, run_in_one_process, run_in_process, sigterm_at_step,
                     split_runs, subprocess_env)
from test_update_step import classification_step, make_batch, make_config
from vit_jax import create_model
from vit_jax import lora as lora_command
from vit_jax.base import errors
from vit_jax.data import device_batches
from vit_jax.families.vit import npz_layout
from vit_jax.training import lora_adapters, optim, sharding, update_step

pytestmark = pytest.mark.long  # a real 8-device process: start first (conftest)

RANK = 2
MLP_TOO = r"(MultiHeadDotProductAttention_1/(query|key|value|out)|MlpBlock_3/Dense_[01])/kernel$"


def lora_config(**overrides):
  config = make_config(lora=dict(rank=RANK, alpha=4.0, dropout=0.0, targets=MLP_TOO), seed=0)
  config.update(overrides)
  return config


def flat(tree):
  return traverse_util.flatten_dict(jax.device_get(tree), sep="/")


def low_rank(delta, kernel) -> int:
  """The rank of a float32 kernel's change, up to the rounding of W + delta - W (each entry
  off by <= eps |W|, so the spectral norm of the noise is <= eps max|W| sqrt(size))."""
  noise = np.finfo(np.float32).eps * np.abs(kernel).max() * np.sqrt(delta.size)
  return np.linalg.matrix_rank(np.asarray(delta, np.float64), tol=noise)


def assert_only_adapters_and_head_moved(before, after):
  """Frozen parameters are not updated at all (bit for bit); every trained one moved by far
  more than rounding (a change of 1e-9 would be noise from the CPU's kernels, not training)."""
  for name, value in after.items():
    change = np.abs(np.asarray(value, np.float64) - before[name]).max()
    if name.endswith((lora_adapters.A, lora_adapters.B)) or name.startswith("head/"):
      assert change > 1e-3, (name, change)
    else:
      assert change == 0, (name, change)


def test_step_zero_is_the_base_model_exactly():
  model = tiny_model(5)
  wrapped = lora_adapters.wrap(model, lora_adapters.settings(lora_config()))
  images = make_batch()["image"]
  params = jax.jit(wrapped.init)(jax.random.PRNGKey(0), images[:1])["params"]
  adapters = [name for name in flat(params) if name.endswith(lora_adapters.A)]
  assert len(adapters) == 2 * 6  # 4 attention projections and 2 MLP kernels per block
  base = {k: v for k, v in flat(params).items()
          if not k.endswith((lora_adapters.A, lora_adapters.B))}
  np.testing.assert_array_equal(
      wrapped.apply({"params": params}, images),
      model.apply({"params": traverse_util.unflatten_dict(base, sep="/")}, images))


@pytest.mark.parametrize("scan_layers", [False, True])
def test_training_moves_kernels_by_rank_at_most_r_and_only_adapters_and_head(scan_layers):
  config = lora_config(grad_norm_clip=0.0)
  model = lora_adapters.wrap(tiny_model(5, scan_layers=scan_layers),
                               lora_adapters.settings(config))
  optimizer = optim.make_optimizer(config, lora_adapters.TRAINED)
  params = lora_adapters.with_adapters(init_params(model.module), model.lora, config.seed)
  state = update_step.create_train_state(params, optimizer)
  step = jax.jit(classification_step(model, optimizer, config))
  for seed in range(2):
    state, _ = step(state, make_batch(seed=seed), jax.random.PRNGKey(1))
  before, after = flat(params), flat(state.params)
  assert_only_adapters_and_head_moved(before, after)  # A moves in step 2, once B is not 0
  moved = flat(lora_adapters.merged(state.params, lora_adapters.settings(config)))
  kernels = [name for name in before if name.endswith(lora_adapters.A)]
  for name in kernels:
    kernel = name[:-len(lora_adapters.A)] + "kernel"
    delta = np.asarray(moved[kernel] - before[kernel], np.float64)
    rows = delta.shape[0] if scan_layers else 1
    fan_in = delta.shape[int(scan_layers)] * (delta.shape[1 + scan_layers]
                                              if kernel.endswith("/out/kernel") else 1)
    for block in delta.reshape(rows, fan_in, -1):
      assert 0 < low_rank(block, before[kernel]) <= RANK, kernel
  state_sizes = sum(x.size for x in jax.tree.leaves(state.opt_state) if x.ndim)
  trained = sum(v.size for k, v in after.items()
                if k.endswith((lora_adapters.A, lora_adapters.B)) or k.startswith("head/"))
  assert state_sizes == trained  # sgd momentum: one buffer per trained parameter


def test_adapter_dropout_trains_the_adapter_path_and_evaluates_the_merged_model():
  """dropout > 0: training computes x W + scale * dropout(x) A B, the same masks for the
  same key; evaluation is the merged model, bit for bit. dropout 0 trains on the merged
  kernels, as before."""
  model, images = tiny_model(5), make_batch()["image"]
  # A random B: with a constant B, A's gradient through the projections that feed only
  # LayerNorms (attention out, MLP Dense_1) would be 0 in exact arithmetic (a LayerNorm's
  # input gradient sums to 0 over features), so A would move by rounding noise alone.
  rng = np.random.default_rng(0)
  params = traverse_util.unflatten_dict(
      {name: (rng.normal(0, 0.1, value.shape).astype(value.dtype) if name.endswith(lora_adapters.B)
              else value + 0.01)
       for name, value in flat(lora_adapters.with_adapters(
           init_params(model), lora_adapters.settings(lora_config()), seed=0)).items()},
      sep="/")
  merged = model.apply(
      {"params": lora_adapters.merged(params, lora_adapters.settings(lora_config()))}, images)
  apply = lambda dropout, train, key=0: lora_adapters.wrap(
      model, lora_adapters.settings(lora_config(
          lora=dict(rank=RANK, alpha=4.0, dropout=dropout, targets=MLP_TOO)))).apply(
              {"params": params}, images, train=train, rngs={"dropout": jax.random.PRNGKey(key)})
  np.testing.assert_array_equal(apply(0.0, train=True), merged)
  np.testing.assert_array_equal(apply(0.5, train=False), merged)
  np.testing.assert_allclose(apply(1e-9, train=True), merged, atol=1e-4)  # the same function
  dropped = apply(0.5, train=True)
  np.testing.assert_array_equal(dropped, apply(0.5, train=True))
  assert np.abs(dropped - apply(0.5, train=True, key=1)).max() > 0.1
  config = lora_config(grad_norm_clip=0.0, lora=dict(rank=RANK, alpha=4.0, dropout=0.5,
                                                     targets=MLP_TOO))
  optimizer = optim.make_optimizer(config, lora_adapters.TRAINED)
  step = jax.jit(classification_step(
      lora_adapters.wrap(model, lora_adapters.settings(config)), optimizer, config))
  start = update_step.create_train_state(params, optimizer)
  state, metrics = step(start, make_batch(), jax.random.PRNGKey(1))
  again, _ = step(start, make_batch(), jax.random.PRNGKey(1))
  assert np.isfinite(metrics["loss"])
  for name, value in flat(state.params).items():
    np.testing.assert_array_equal(value, flat(again.params)[name])  # resumes exactly
  assert_only_adapters_and_head_moved(flat(params), flat(state.params))


def test_adapters_are_split_over_tensor_like_their_kernels():
  sizes = {"data": 2, "fsdp": 1, "tensor": 2}
  block = "Transformer/encoderblock_0/"
  spec = lambda name, shape: tuple(sharding.partition_spec(block + name, shape, sizes))
  attention, mlp = "MultiHeadDotProductAttention_1/", "MlpBlock_3/"
  assert spec(attention + "query/lora_a", (64, 4)) == (None, None)
  assert spec(attention + "query/lora_b", (4, 4, 16)) == (None, "tensor", None)
  assert spec(attention + "out/lora_a", (4, 16, 4)) == ("tensor", None, None)
  assert spec(attention + "out/lora_b", (4, 64)) == (None, None)
  assert spec(mlp + "Dense_0/lora_b", (4, 128)) == (None, "tensor")
  assert spec(mlp + "Dense_1/lora_a", (128, 4)) == ("tensor", None)


def test_merge_takes_what_the_run_used_from_a_released_style_base():
  """A released base has another head, a pre_logits layer the run dropped and a position
  embedding for another image size: merge still rebuilds the run's params bit for bit."""
  config = lora_config()
  params = lora_adapters.with_adapters(init_params(tiny_model(5)), lora_adapters.settings(config),
                                       config.seed)
  trained = jax.tree.map(lambda x: x + 0.01, params)  # adapters and head moved
  merged, adapters = lora_adapters.export(params, trained, lora_adapters.settings(config),
                                         class_names=list("abcde"), max_patches=9)
  base = {k: v for k, v in flat(params).items()
          if not k.endswith((lora_adapters.A, lora_adapters.B))}
  base.update({"head/kernel": np.ones((32, 7)), "head/bias": np.ones(7),
               "pre_logits/kernel": np.ones((32, 32)), "pre_logits/bias": np.ones(32),
               npz_layout.POSEMB: np.ones((1, 10, 32))})
  rebuilt = lora_adapters.merge(base, adapters)
  assert rebuilt.keys() == flat(merged).keys()
  for name, value in flat(merged).items():
    np.testing.assert_array_equal(rebuilt[name], value, err_msg=name)
  assert lora_adapters.class_names(adapters) == list("abcde")
  assert lora_adapters.max_patches(adapters) == 9  # a NaFlex run's budget, for the merge
  assert lora_adapters.base_matches(base, adapters)  # its head and pre_logits are not the run's
  meta = json.loads(str(adapters[lora_adapters.SETTINGS]))
  assert lora_adapters.base_matches(base, {**adapters, lora_adapters.SETTINGS: np.array(json.dumps(
      {k: v for k, v in meta.items() if k != "base_sha256"}))}) is None  # an older file
  mlp = "Transformer/encoderblock_1/MlpBlock_3/Dense_1/kernel"
  assert not lora_adapters.base_matches({**base, mlp: base[mlp] + 1}, adapters)
  for damaged in ("{not json", '{"base": [], "rank": 0, "alpha": 1.0}'):
    with pytest.raises(errors.InvalidInput, match="the adapters' lora/settings entry is "
                       "damaged .*: pass the adapters.npz that a LoRA run wrote"):
      lora_adapters.merge(base, {**adapters, lora_adapters.SETTINGS: np.array(damaged)})
  del base["Transformer/encoderblock_1/MlpBlock_3/Dense_1/kernel"]
  with pytest.raises(errors.InvalidInput, match="the base checkpoint has no Transformer/"
                     "encoderblock_1/MlpBlock_3/Dense_1/kernel: pass the checkpoint"):
    lora_adapters.merge(base, adapters)


@pytest.mark.parametrize("overrides, message", [
    (dict(rank=0, targets="query/kernel$"), "config.lora.targets='query/kernel$' is set but "
     "LoRA is off (config.lora.rank=0)"),
    (dict(dropout=-0.1), "config.lora.dropout=-0.1 must be in [0, 1)"),
    (dict(dropout=1.0), "config.lora.dropout=1.0 must be in [0, 1)"),
    (dict(rank=0, dropout=0.1, targets=lora_adapters.DEFAULT_TARGETS),
     "config.lora.dropout=0.1 is set but LoRA is off"),
    (dict(rank=-1), "config.lora.rank=-1 must be a whole number >= 0"),
    (dict(alpha=float("nan")), "config.lora.alpha=nan must be > 0 and finite"),  # diverged
    (dict(alpha=float("inf")), "config.lora.alpha=inf must be > 0 and finite"),
    (dict(dropout=None), "config.lora.dropout=None must be in [0, 1)"),
    (dict(targets=None), "config.lora.targets=None is not a regular expression"),
])
def test_bad_settings_are_one_line(overrides, message):
  config = lora_config()
  config.lora.update(overrides)
  with pytest.raises(errors.InvalidInput) as caught:
    lora_adapters.check(config)
  assert message in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.parametrize("overrides, message", [
    (dict(rank=33), "config.lora.rank=33 exceeds Transformer/encoderblock_0/"
     "MlpBlock_3/Dense_0/kernel's size (32 x 64): use a rank <= 32"),
    (dict(targets="Dense_7/kernel$"), "config.lora.targets='Dense_7/kernel$' matches no "
     "parameter; paths look like"),
    (dict(targets="embedding/kernel$"), "matches embedding/kernel (4, 4, 3, 32), which is not "
     "a dense kernel"),
])
def test_targets_and_ranks_that_cannot_work_are_one_line(overrides, message):
  config = lora_config()
  config.lora.update(overrides)
  with pytest.raises(errors.InvalidInput) as caught:
    lora_adapters.with_adapters(init_params(tiny_model(5)), lora_adapters.settings(config),
                                config.seed)
  assert message in str(caught.value) and "\n" not in str(caught.value)


def test_default_targets_are_each_familys_own():
  """config.lora.targets left at its default adapts what the model's family names: a ViT's
  attention kernels, a Mixer's MLPs."""
  config = lora_config()
  config.lora.targets = lora_adapters.DEFAULT_TARGETS
  settings = lora_adapters.settings(config)
  vit = flat(lora_adapters.with_adapters(init_params(tiny_model(5)), settings, 0))
  mixer = create_model("Mixer-S_16", num_classes=5, patch_size=4, hidden_dim=16,
                       num_blocks=1, tokens_mlp_dim=8, channels_mlp_dim=32)
  mixer = flat(lora_adapters.with_adapters(init_params(mixer), settings, 0))
  adapted = lambda params: sorted({name.rsplit("/", 2)[-2] for name in params
                                   if name.endswith(lora_adapters.B)})
  assert adapted(vit) == ["key", "out", "query", "value"]
  assert adapted(mixer) == ["Dense_0", "Dense_1"]
  assert any("token_mixing" in name for name in mixer if name.endswith(lora_adapters.B))


# On 8 devices, data 2 x fsdp 2 x tensor 2, from the shared demo run's params.npz: a run
# preempted (SIGTERM) after step 3 and rerun to resume there, then 6 steps at once. The same
# settings throughout: one compiled train step serves all three runs.
MESH = ["--config.mesh.data=2", "--config.mesh.fsdp=2", "--config.mesh.tensor=2"]
LORA = [f"--config.lora.rank={RANK}", "--config.lora.alpha=4.0", "--config.lora.dropout=0.1",
        "--config.eval_every=6", "--config.checkpoint_every=6"]
PREEMPTED_AT = 3


def run_mesh_runs(runs):
  """The process of mesh_runs: `runs` one after another (helpers.run_in_one_process), the
  first stopped by a real SIGTERM during its step PREEMPTED_AT, as a preempted job is."""
  device_batches.prefetch_to_device = sigterm_at_step(PREEMPTED_AT)  # the first run's stream
  run_in_one_process("vit_jax.main", runs)


@pytest.fixture(name="mesh_runs", scope="module")
def fixture_mesh_runs(tmp_path_factory, demo_run):
  root = tmp_path_factory.mktemp("lora")
  base = demo_run[0] / "params.npz"
  args = lambda workdir: [*demo_args(pretrained=base), *MESH, *LORA, f"--workdir={root / workdir}"]
  tests = REPO / "tests"
  done = subprocess.run(
      [sys.executable, __file__, json.dumps([args("resumed"), args("resumed"), args("whole")])],
      cwd=REPO, env=subprocess_env(8, PYTHONPATH=os.pathsep.join(
          map(str, (REPO, tests, tests / "training")))),
      capture_output=True, text=True, timeout=600)
  ended = split_runs(done.stderr)
  assert done.returncode == 0 and [code for code, _, _ in ended] == [0, 0, 0], done.stderr[-3000:]
  assert ended[0][1] == [str(PREEMPTED_AT)], ended[0][2][-2000:]  # saved at the stop only
  assert f"resumed from step {PREEMPTED_AT}" in ended[1][2]
  return base, root / "whole", root / "resumed"


def test_mesh_run_resumes_exactly_and_merge_rebuilds_params_bit_for_bit(mesh_runs, tmp_path):
  base, whole, resumed = mesh_runs
  whole_params = load_params(whole)
  for name, value in load_params(resumed).items():
    np.testing.assert_allclose(value, whole_params[name], rtol=1e-6, atol=1e-7, err_msg=name)
  base_params = dict(np.load(base))
  assert set(whole_params) == set(base_params)  # the released layout, no adapters
  query = "Transformer/encoderblock_1/MultiHeadDotProductAttention_1/query/kernel"
  delta = (whole_params[query] - base_params[query]).reshape(64, -1)
  assert 0 < low_rank(delta, base_params[query]) <= RANK
  mlp = "Transformer/encoderblock_1/MlpBlock_3/Dense_0/kernel"
  np.testing.assert_array_equal(whole_params[mlp], base_params[mlp])
  table = (whole / "parameters.txt").read_text()
  assert f"| {query[:-len('kernel')]}lora_b " in table
  rows = {line.split("|")[1].strip(): line.split("|")[-2].strip() for line in table.splitlines()
          if line.startswith("| T")}
  assert rows[query] == "no" and rows[query[:-len("kernel")] + "lora_a"] == "yes"
  out = tmp_path / "merged.npz"
  done = run_in_process(lora_command, base, whole / lora_adapters.ADAPTERS, out)
  assert done.returncode == 0, done.stderr
  assert out.read_bytes() == (whole / "params.npz").read_bytes()


def test_merge_of_a_file_without_adapters_is_one_line(mesh_runs, tmp_path):
  base = mesh_runs[0]
  done = run_in_process(lora_command, base, base, tmp_path / "merged.npz")
  assert done.returncode == 1 and done.stderr.count("\n") == 1
  assert "holds no lora/settings: pass the adapters.npz" in done.stderr
  assert not os.path.exists(tmp_path / "merged.npz")


def test_merge_onto_another_base_of_the_same_shapes_is_refused(mesh_runs, tmp_path):
  """Another run's params.npz fits every array of the adapters' base: only the identity
  recorded in adapters.npz tells them apart."""
  _, whole, _ = mesh_runs
  other, adapters = whole / "params.npz", whole / lora_adapters.ADAPTERS
  out = tmp_path / "merged.npz"
  done = run_in_process(lora_command, other, adapters, out)
  assert done.returncode == 1 and done.stderr.count("\n") == 1, done.stderr
  assert (f"error: {adapters} were trained from another base than {other} (its frozen "
          "arrays differ): pass the checkpoint the run started from (its config.json's "
          "pretrained), or --allow_other_base to merge onto this one anyway") in done.stderr
  assert not out.exists()
  done = run_in_process(lora_command, other, adapters, out, "--allow_other_base")
  assert done.returncode == 0 and out.exists(), done.stderr


if __name__ == "__main__":  # python test_lora_adapters.py RUNS_JSON: fixture_mesh_runs
  run_mesh_runs(json.loads(sys.argv[1]))
