"""configs/augreg.py (a released AugReg file's name -> the run that made it) and
configs/vit_s16_i1k.py (big_vision's plain ViT-S/16 baseline)."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from helpers import load_module
from vit_jax.checkpoints import hub_table, released
from vit_jax.families.vit import bucket_files
from vit_jax.models import model_config
from vit_jax.models import family_registry
from vit_jax.training import optim

AUGREG = load_module("augreg.py")
S16_I1K = load_module("vit_s16_i1k.py")
S16 = "S_16-i21k-300ep-lr_0.001-aug_light1-wd_0.03-do_0.0-sd_0.0"
L16 = "L_16-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.1-sd_0.1"
B16_I1K = "B_16-i1k-300ep-lr_0.001-aug_strong2-wd_0.1-do_0.1-sd_0.1"
I21K_STEPS_PER_EPOCH = (14_197_122 - 51_200) / 4096  # big_vision trains on full[51200:]


def table_names():
  """Every AugReg file this project names: the bare-name table and the Hub mirror table."""
  mirrored = {path[len("augreg/"):].removesuffix(".npz")
              for path in hub_table.load()["mirrors"] if path.startswith("augreg/")}
  return sorted(mirrored | set(bucket_files.AUGREG_I21K.values()))


TABLE = table_names()
MIRRORED = set(hub_table.load()["mirrors"])
# Fine-tuning names whose pre-trained file has no Hub mirror (the bucket refuses anonymous
# downloads): refused, e.g. the light0 R26_S_32 file's and the i1k files' fine-tunings.
UNREACHABLE = [name for name in TABLE if "--" in name
               and f"augreg/{name.split('--')[0]}.npz" not in MIRRORED]


def test_the_table_holds_pre_training_and_fine_tuning_names():
  assert len(TABLE) >= 30
  assert sum("--" not in name for name in TABLE) >= 10 and S16 in TABLE


@pytest.mark.parametrize("name", [name for name in TABLE if name not in UNREACHABLE])
def test_every_released_name_resolves(name):
  config = AUGREG.get_config(name)
  model_config.check_config(config)
  optim.check(config)
  pretrained, _, suffix = name.partition("--")
  model = family_registry.canonical_name(pretrained.split("-")[0])
  assert config.model_name == model
  if suffix:  # the fine-tuning run, from the released pre-training file
    assert config.pretrained == f"augreg/{pretrained}"
    assert released.resolve(config.pretrained, local_dir=None) == (
        f"gs://vit_models/augreg/{pretrained}.npz")
    assert (config.optimizer, config.batch, config.model.stochastic_depth) == ("sgd", 512, 0.0)
    assert config.pp.crop == int(suffix.rsplit("res_", 1)[1])
  else:
    assert config.pretrained is None and config.batch == 4096


def test_small_vit_pre_training_field_by_field():
  config = AUGREG.get_config(S16)
  assert (config.model_name, config.dataset, config.train_split, config.eval_split) == (
      "ViT-S_16", "imagenet21k", "full[51200:]", "full[:25600]")
  assert (config.loss, config.model.head_bias_init, config.model.representation_size) == (
      "sigmoid_xent", -10.0, None)
  assert (config.pp.crop, config.pp.randaug, config.pp.mixup_alpha) == (224, (2, 0), 0.0)
  assert (config.model.dropout_rate, config.model.stochastic_depth) == (0.0, 0.0)
  assert (config.optimizer, config.optim_dtype, config.adam_b1, config.adam_b2) == (
      "adam", "bfloat16", 0.9, 0.999)
  assert (config.base_lr, config.weight_decay, config.decay_type, config.warmup_steps) == (
      0.001, 0.03, "cosine", 10_000)
  assert (config.grad_norm_clip, config.batch, config.accum_steps) == (1.0, 4096, 1)
  assert config.total_steps == int(300 * I21K_STEPS_PER_EPOCH)
  assert model_config.check_config(config).classifier == "token"  # the released files' pooling


def test_large_vit_and_the_thirty_epoch_runs():
  config = AUGREG.get_config(L16)
  assert (config.pp.randaug, config.pp.mixup_alpha, config.weight_decay) == ((2, 15), 0.2, 0.1)
  assert (config.model.dropout_rate, config.model.stochastic_depth) == (0.1, 0.1)
  thirty = AUGREG.get_config(L16.replace("i21k", "i21k_30"))
  assert thirty.total_steps == int(30 * I21K_STEPS_PER_EPOCH)
  assert AUGREG.get_config(L16.replace("300ep", "30ep")).total_steps == thirty.total_steps


def test_imagenet_1k_pre_training():
  config = AUGREG.get_config(B16_I1K)
  assert (config.dataset, config.train_split, config.eval_split) == (
      "imagenet2012", "train[:99%]", "validation")
  assert config.evals.minival.split == "train[99%:]"
  assert (config.loss, config.model.head_bias_init, config.model.representation_size) == (
      "softmax_xent", 0.0, 768)
  assert (config.pp.randaug, config.pp.mixup_alpha) == ((2, 20), 0.8)
  assert config.total_steps == 1_268_355 * 300 // 4096


@pytest.mark.parametrize("aug, randaug, mixup", [
    ("none", None, 0.0), ("light1", (2, 0), 0.0), ("light2", (2, 10), 0.2),
    ("medium1", (2, 15), 0.2), ("medium2", (2, 15), 0.5), ("strong1", (2, 20), 0.5),
    ("strong2", (2, 20), 0.8)])
def test_augmentation_levels_are_big_vision_s_grid(aug, randaug, mixup):
  config = AUGREG.get_config(S16.replace("aug_light1", f"aug_{aug}"))
  assert (config.pp.randaug, config.pp.mixup_alpha) == (randaug, mixup)


def test_an_image_folder_in_place_of_the_tfds_build():
  config = AUGREG.get_config(f"{S16},/data/imagenet21k")
  assert (config.dataset, config.train_split, config.eval_split) == (
      "/data/imagenet21k", "train", "test")
  assert config.total_steps == AUGREG.get_config(S16).total_steps


def test_fine_tuning_suffix():
  name = ("B_16-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.0-sd_0.0"
          "--imagenet2012-steps_20k-lr_0.01-res_384")
  config = AUGREG.get_config(name)
  assert config.pretrained == "augreg/" + name.split("--")[0]
  assert (config.dataset, config.total_steps, config.base_lr, config.pp.crop) == (
      "imagenet2012", 20_000, 0.01, 384)
  assert (config.optimizer, config.momentum, config.batch, config.weight_decay) == (
      "sgd", 0.9, 512, 0.0)
  assert (config.model.dropout_rate, config.model.stochastic_depth, config.polyak_decay) == (
      0.0, 0.0, 0.0)
  assert AUGREG.get_config(name.replace("steps_20k", "steps_500")).total_steps == 500


@pytest.mark.parametrize("name, says", [
    ("X_16-i21k-300ep-lr_0.001-aug_light1-wd_0.03-do_0.0-sd_0.0",
     "unknown model 'X_16'; models: Ti_16, "),
    ("S_16-i22k-300ep-lr_0.001-aug_light1-wd_0.03-do_0.0-sd_0.0",
     "unknown data 'i22k'; one of i21k, i21k_30, i1k"),
    ("S_16-i21k-300ep-lr_0.001-aug_heavy-wd_0.03-do_0.0-sd_0.0",
     "unknown augmentation 'aug_heavy'; one of aug_none, "),
    ("S_16-i21k-300-lr_0.001-aug_light1-wd_0.03-do_0.0-sd_0.0",
     "epochs '300' must read like 300ep"),
    ("S_16-i21k-300ep-lr_0.001-aug_light1-wd_x-do_0.0-sd_0.0", "'wd_x' must read like wd_0.1"),
    ("S_16-i21k-300ep", "3 parts where a pre-training name has 8"),
    (f"{S16}--imagenet2012-steps_20k-lr_0.01", "fine-tuning part 'imagenet2012-steps_20k-lr_0.01'"),
    (f"{S16}--imagenet2012-steps_20k-lr_0.01-res_384,/data/x", "takes no ',DATASET'"),
    ("R26_S_32-i21k-300ep-lr_0.001-aug_light0-wd_0.03-do_0.1-sd_0.1", "aug_light0 is a released"),
    ("S_16-i21k-300ep-lr_0.001-aug_light1-wd_0.03-do_0.0-sd_1.0", "stochastic_depth=1.0 must"),
])
def test_unknown_names_and_parts_are_one_line(name, says):
  with pytest.raises(ValueError) as raised:
    model_config.check_config(AUGREG.get_config(name))
  message = str(raised.value)
  assert says in message and "\n" not in message, message


def test_a_fine_tuning_whose_pre_trained_file_is_unreachable_is_one_line(tmp_path, monkeypatch):
  """The light0 R26_S_32 file (and the i1k pre-trainings) have no Hub mirror: refused at
  once naming what is mirrored, unless a local copy is there."""
  assert len(UNREACHABLE) >= 5 and any("aug_light0" in name for name in UNREACHABLE)
  monkeypatch.chdir(tmp_path)
  for name in UNREACHABLE:
    start = name.split("--")[0]
    with pytest.raises(ValueError) as raised:
      AUGREG.get_config(name)
    message = str(raised.value)
    assert "\n" not in message and message.startswith(
        f"configs/augreg.py:{name}: its pre-trained file augreg/{start}.npz has no reachable "
        f"copy"), message
    model = start.split("-")[0]
    offered = message.rsplit(f"mirrored pre-training of {model}: ", 1)[1].split(", ")
    assert offered and all(f"augreg/{o}.npz" in MIRRORED and o.startswith(model + "-")
                           for o in offered), message
    assert f"python -m vit_jax.download augreg/{name})" in message  # itself is mirrored
  name = UNREACHABLE[0]
  (tmp_path / "checkpoints" / "augreg").mkdir(parents=True)
  (tmp_path / "checkpoints" / "augreg" / (name.split("--")[0] + ".npz")).write_bytes(b"")
  assert AUGREG.get_config(name).pretrained == "augreg/" + name.split("--")[0]


def big_vision_chain(lr, wd, unit_schedule):
  """big_vision's optax.make for these configs (clip, scale_by_adam with a bfloat16 first
  moment, scale(lr), add_decayed_weights(wd) on kernels, the schedule with peak 1,
  scale(-1)), written with optax primitives."""
  kernels = lambda params: jax.tree_util.tree_map_with_path(
      lambda path, _: path[-1].key == "kernel", params)
  return optax.chain(optax.clip_by_global_norm(1.0),
                     optax.scale_by_adam(mu_dtype=jnp.bfloat16), optax.scale(lr),
                     optax.add_decayed_weights(wd, kernels),
                     optax.scale_by_schedule(unit_schedule), optax.scale(-1.0))


@pytest.mark.parametrize("name", [L16, S16])
def test_weight_decay_is_big_vision_s_per_step(name):
  """big_vision writes wd = 0.0001 for the files named wd_0.1 (lr 0.001): its decay per step
  is wd x schedule. This project's weight_decay (the name's wd) gives the same update."""
  config = AUGREG.get_config(name)
  config.warmup_steps, config.total_steps = 2, 10  # a few steps cover warm-up and decay
  big_vision_wd = {0.1: 0.0001, 0.03: 0.00003}[config.weight_decay]
  ours = optim.make_optimizer(config)
  schedule = optim.make_schedule(config)
  theirs = big_vision_chain(config.base_lr, big_vision_wd,
                            lambda step: schedule(step) / config.base_lr)
  key = jax.random.PRNGKey(0)
  params = {"Dense_0": {"kernel": jax.random.normal(key, (8, 4)), "bias": jnp.ones((4,))}}
  state_ours, state_theirs = ours.init(params), theirs.init(params)
  for step in range(4):
    grads = jax.tree.map(lambda p, i=step: jax.random.normal(jax.random.fold_in(key, i + 1),
                                                             p.shape), params)
    update_ours, state_ours = ours.update(grads, state_ours, params)
    update_theirs, state_theirs = theirs.update(grads, state_theirs, params)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-10),
                 update_ours, update_theirs)
    params = optax.apply_updates(params, update_ours)
  # The decay alone (no gradient) at full learning rate: kernels shrink by lr x wd.
  config.warmup_steps = 0
  zero = jax.tree.map(jnp.zeros_like, params)
  update, _ = optim.make_optimizer(config).update(zero, optim.make_optimizer(config).init(
      params), params)
  np.testing.assert_allclose(update["Dense_0"]["kernel"],
                             -big_vision_wd * params["Dense_0"]["kernel"], rtol=1e-5)
  np.testing.assert_array_equal(update["Dense_0"]["bias"], 0.0)


def test_plain_vit_s16_baseline():
  config = S16_I1K.get_config()
  model = model_config.check_config(config)
  assert (model.classifier, model.posemb, model.representation_size) == ("gap", "sincos2d",
                                                                         384)
  assert (config.batch, config.pp.randaug, config.pp.mixup_alpha) == (1024, (2, 10), 0.2)
  assert (config.optimizer, config.optim_dtype, config.base_lr, config.weight_decay) == (
      "adam", "bfloat16", 0.001, 0.1)
  assert (config.warmup_steps, config.decay_type, config.grad_norm_clip) == (10_000, "cosine",
                                                                             1.0)
  assert (config.train_split, config.evals.minival.split) == ("train[:99%]", "train[99%:]")
  assert config.total_steps == 1_268_355 * 90 // 1024
  assert S16_I1K.get_config("300ep").total_steps == 1_268_355 * 300 // 1024
  with pytest.raises(ValueError, match=r"^configs/vit_s16_i1k.py takes the epochs as NNNep"):
    S16_I1K.get_config("300")


def test_a_name_trains_end_to_end_on_a_tiny_model(tmp_path):
  """L/16's recipe (dropout, stochastic depth, mixup, sigmoid loss, head bias, Adam with a
  bfloat16 moment) on a 2-block model and the embedded digits: a few steps run."""
  from vit_jax.training import loop  # pylint: disable=import-outside-toplevel
  config = AUGREG.get_config(L16)
  config.model.update(patch_size=4, hidden_size=32, mlp_dim=64, num_heads=2, num_layers=2)
  config.update(dict(dataset="digits", train_split="train", eval_split="test", total_steps=4,
                     warmup_steps=2, batch=32, batch_eval=128, eval_every=4,
                     checkpoint_every=4, progress_every=2))
  config.pp.update(dict(crop=16, flip=False))
  result = loop.train_and_evaluate(config, str(tmp_path / "run"))
  assert np.isfinite(result["eval/loss"]) and result["eval/examples"] == 300
