"""SigLIP / SigLIP 2 image towers fine-tuned by the main job
(vit_jax.families.two_tower.recipes, configs/siglip2_*.py): a tiny random-weight two-tower
file saved in big_vision's layout and as a Hugging Face SigLIP folder, its image tower
loaded (not trained from scratch) under a new head, one short run on the digits shared by
the module, every fine-tuning control."""

import json

import jax
import ml_collections
import numpy as np
import pytest
from flax import traverse_util

from helpers import CONFIG_DIR, load_module, run_in_process, write_image
from two_tower_helpers import random_params, save_siglip2_folder, tiny_siglip
from vit_jax import benchmark, fewshot, load_npz, plan, predict
from vit_jax.checkpoints import npz
from vit_jax.checkpoints import format_conversion
from vit_jax.export import __main__ as export_command
from vit_jax.families.two_tower import npz_file
from vit_jax.families.two_tower import recipes
from vit_jax.training import lora_adapters, objectives, param_groups, sharding, static_checks

TINY = dict(patch_size=8, hidden_size=16, mlp_dim=32, num_heads=2, num_layers=2)
RUN = dict(total_steps=6, warmup_steps=2, batch=32, batch_eval=128, accum_steps=1,
           progress_every=2, eval_every=3, checkpoint_every=3)


@pytest.fixture(name="towers", scope="module")
def fixture_towers(tmp_path_factory):
  """{'npz': big_vision .npz, 'hf': HF SiglipModel folder, 'hf2': HF Siglip2Model (NaFlex)
  folder, 'img': the tower's flat arrays}."""
  folder = tmp_path_factory.mktemp("towers")
  model = tiny_siglip()
  params = random_params(model, 8)
  npz_file.save_two_tower(params, folder / "tiny.npz")
  format_conversion.convert(str(folder / "tiny.npz"), str(folder / "hf"), to="hf")
  save_siglip2_folder(folder / "hf2", model, params)  # a Linear patch embedding, 16 patches
  img = traverse_util.flatten_dict(params["params"]["img"], sep="/")
  return {"npz": str(folder / "tiny.npz"), "hf": str(folder / "hf"),
          "hf2": str(folder / "hf2"), "img": img}


def tiny_config(pretrained, dataset="digits", **overrides):
  """configs/siglip2_b16.py:DATASET with a tiny tower, digits at 16 px, a few steps."""
  config = load_module("siglip2_b16.py").get_config(dataset)
  config.model.update(TINY)
  config.pretrained = pretrained
  config.pp.update(preset="bit", resize=18, crop=16, flip=False)
  config.update({**RUN, **overrides})
  return config


def loaded(config, num_classes=10):
  module, params = objectives.get(config).create_model(config, num_classes,
                                                       load_pretrained=True)
  return module, traverse_util.flatten_dict(params, sep="/")


@pytest.mark.parametrize("source", ["npz", "hf", "hf2"])
def test_the_image_tower_is_loaded_under_a_new_zero_head(towers, source):
  module, flat = loaded(tiny_config(towers[source]))
  assert module.classifier == "map" and module.num_classes == 10
  np.testing.assert_array_equal(flat["head/kernel"], np.zeros((16, 10), np.float32))
  for name, value in towers["img"].items():
    if name.endswith("pos_embedding"):  # 4 x 4 patches at 32 px -> 2 x 2 at 16 px
      assert value.shape == (1, 16, 16) and flat[name].shape == (1, 4, 16)
    else:
      np.testing.assert_allclose(flat[name], value, rtol=1e-6, atol=1e-6, err_msg=name)
  assert set(flat) == set(towers["img"]) | {"head/kernel", "head/bias"}


def test_gap_leaves_the_map_head_out(towers):
  config = tiny_config(towers["npz"])
  config.model.classifier = "gap"
  module, flat = loaded(config)
  assert module.classifier == "gap" and not any(k.startswith("MAPHead_0") for k in flat)
  logits = jax.jit(module.apply)({"params": traverse_util.unflatten_dict(flat, sep="/")},
                                 np.zeros((2, 16, 16, 3), np.float32))  # one program
  assert logits.shape == (2, 10)


@pytest.fixture(name="run", scope="module")
def fixture_run(towers, tmp_path_factory):
  from vit_jax.training import loop  # pylint: disable=import-outside-toplevel
  workdir = tmp_path_factory.mktemp("siglip") / "run"
  config = tiny_config(towers["npz"])
  config.lock()
  return workdir, loop.train_and_evaluate(config, str(workdir))


def test_the_main_job_fine_tunes_the_tower_and_writes_a_classifier(run, towers):
  workdir, result = run
  assert np.isfinite(result["eval/loss"]) and result["eval/examples"] == 300
  module, params = load_npz(str(workdir / "params.npz"))
  flat = traverse_util.flatten_dict(params, sep="/")
  assert (module.classifier, module.num_classes) == ("map", 10)
  assert np.abs(flat["head/kernel"]).max() > 0  # trained from zero
  for name in ("embedding/kernel", "MAPHead_0/probe",
               "Transformer/encoderblock_0/MlpBlock_3/Dense_0/kernel"):
    moved = np.abs(flat[name] - towers["img"][name]).max()
    assert 0 < moved < 0.02, name  # a few small steps from the tower, not a fresh init


def test_predict_and_plan_take_the_fine_tuned_classifier(run, tmp_path):
  workdir, _ = run
  image = tmp_path / "digit.png"
  write_image(image, size=(16, 16))
  done = run_in_process(predict, f"--checkpoint={workdir / 'params.npz'}", "--top_k=3", image)
  assert done.returncode == 0, done.stderr
  assert len([line for line in done.stdout.splitlines() if line.startswith(" ")]) == 3
  args = [f"--config={CONFIG_DIR / 'siglip2_b16.py'}:digits",
          f"--config.pretrained={workdir / 'params.npz'}", "--num_classes=10", "--suggest=false",
          *(f"--config.model.{k}={v}" for k, v in TINY.items()),
          *(f"--config.{k}={v}" for k, v in RUN.items()),
          "--config.pp.preset=bit", "--config.pp.resize=18", "--config.pp.crop=16"]
  done = run_in_process(plan, *args)
  assert done.returncode == 0, done.stderr
  assert "memory" in done.stdout.lower()
  done = run_in_process(benchmark, *args[:1], *args[4:], "--steps=1",
                        "--peak_tflops=1",  # the peak, measured: test_throughput's
                        f"--json={tmp_path / 'bench.jsonl'}")
  assert done.returncode == 0, done.stderr
  record = json.loads((tmp_path / "bench.jsonl").read_text().splitlines()[0])
  assert record["image_size"] == 16 and record["img_per_sec"] > 0


def test_fewshot_and_export_take_the_fine_tuned_classifier(run, tmp_path):
  workdir, _ = run
  done = run_in_process(fewshot, f"--checkpoint={workdir / 'params.npz'}", "--dataset=digits",
                        "--shots=5", "--seeds=1", "--image_size=16", "--json=-")
  assert done.returncode == 0, done.stderr
  assert 0 <= json.loads(done.stdout)["5shot"] <= 1
  done = run_in_process(export_command, workdir / "params.npz", tmp_path / "hlo",
                        "--to=stablehlo")
  assert done.returncode == 0, done.stderr
  assert any((tmp_path / "hlo").iterdir())


CONTROLS = {
    "layer_decay": dict(layer_decay=0.5),
    "lr_mults": dict(lr_mults=(("^MAPHead_0/", 0.1),)),
    "linear probe": dict(freeze="^(?!head/)"),
    "LP-FT": dict(freeze="^(?!head/)", freeze_steps=3),
    "LoRA": dict(lora=ml_collections.ConfigDict(dict(rank=2, alpha=None, dropout=0.0,
                 targets=r"MultiHeadDotProductAttention_1/(query|key|value|out)/kernel$"))),
}


@pytest.mark.parametrize("control", list(CONTROLS))
def test_every_fine_tuning_control_is_accepted_on_the_tower(towers, control):
  config = tiny_config(towers["npz"], **{"layer_decay": 1.0, **CONTROLS[control]})
  static_checks.check_static(config, sharding.make_mesh(config.mesh), objectives.get(config))
  _, flat = loaded(config)
  params = traverse_util.unflatten_dict(flat, sep="/")
  if control in ("layer_decay", "lr_mults"):
    mults = traverse_util.flatten_dict(param_groups.multipliers(params, config), sep="/")
    if control == "layer_decay":
      assert mults["Transformer/encoderblock_0/LayerNorm_0/scale"] == 0.25  # 0.5 ** (2 - 0)
      assert mults["embedding/kernel"] == 0.125 and mults["MAPHead_0/probe"] == 1.0
    else:
      assert mults["MAPHead_0/probe"] == 0.1 and mults["embedding/kernel"] == 1.0
  elif control == "LoRA":
    settings = lora_adapters.settings(config)
    adapted = traverse_util.flatten_dict(lora_adapters.with_adapters(params, settings, 0),
                                         sep="/")
    assert sum("lora" in name for name in adapted) == 2 * 4 * TINY["num_layers"]
    merged = traverse_util.flatten_dict(lora_adapters.merged(
        traverse_util.unflatten_dict(adapted, sep="/"), settings), sep="/")
    for name, value in flat.items():  # adapters start at zero: the tower unchanged
      np.testing.assert_allclose(merged[name], value, atol=1e-6, err_msg=name)
  else:
    groups = traverse_util.flatten_dict(param_groups.labels(params, config), sep="/")
    assert {k for k, g in groups.items() if g == param_groups.TRAIN} == {"head/kernel",
                                                                         "head/bias"}
    assert len(set(groups.values())) == 2


def test_the_three_configs_name_released_towers_and_their_crops():
  from vit_jax.families.two_tower import (  # pylint: disable=import-outside-toplevel
      names as two_tower_names)
  for file, size in (("siglip2_b16.py", 224), ("siglip2_l16.py", 256),
                     ("siglip2_so400m14.py", 378)):
    config = load_module(file).get_config("/data/my_images")
    assert config.pretrained in two_tower_names.NAMES and config.pp.crop == size
    assert config.pp.crop % config.model.patch_size == 0
    assert config.model.classifier == "map" and 0 < config.layer_decay < 1
    assert (config.dataset, config.label_smoothing) == ("/data/my_images", 0.1)
  assert recipes.TOWERS["So400m_14"][1]["num_layers"] == 27


def test_a_tower_of_another_size_is_one_line(towers):
  config = tiny_config(towers["npz"])
  config.model.mlp_dim = 48  # the config's tower is not the file's
  with pytest.raises(npz.CheckpointError) as e:
    loaded(config)
  assert "\n" not in str(e.value) and "mlp_dim 32" in str(e.value)


def test_predict_max_patches_reads_each_image_as_naflex(towers, tmp_path):
  """predict --max_patches on a MAP-pooled classifier: the 40 x 16 image as 2 x 5 patches
  (what naflex_vit computes by hand), the 32 x 32 one on the table's own 4 x 4 grid (what
  the fixed-size reading gives)."""
  module, params = load_npz(towers["npz"], num_classes=5)
  params["head"]["kernel"] = np.random.default_rng(0).standard_normal((16, 5)).astype(
      np.float32)
  npz.save_npz(params, tmp_path / "classifier.npz")
  square, wide = tmp_path / "square.png", tmp_path / "wide.png"
  write_image(square, size=(32, 32))
  write_image(wide, size=(40, 16))
  scores = {}
  for name, extra in (("fixed", []), ("naflex", ["--max_patches=16"])):
    done = run_in_process(predict, f"--checkpoint={tmp_path / 'classifier.npz'}", "--json=-",
                          "--top_k=5", *extra, square, wide)
    assert done.returncode == 0, done.stderr
    scores[name] = [[c["probability"] for c in sorted(r["top_k"], key=lambda c: c["class"])]
                    for r in json.loads(done.stdout)]
  np.testing.assert_allclose(scores["naflex"][0], scores["fixed"][0], rtol=1e-4, atol=1e-6)
  from vit_jax.data import image_files  # pylint: disable=import-outside-toplevel
  from vit_jax.families.vit import (  # pylint: disable=import-outside-toplevel
      naflex_model as naflex_vit)
  patches, mask, grid = image_files.load_naflex(str(wide), 8, 16)
  assert grid.tolist() == [2, 5]
  logits = jax.jit(naflex_vit.from_vit(module, 4).apply)(  # one program, not one per op
      {"params": params}, patches[None], mask[None], grid[None])
  np.testing.assert_allclose(scores["naflex"][1], np.asarray(jax.nn.softmax(logits))[0],
                             rtol=1e-4, atol=1e-6)
  assert np.abs(np.subtract(scores["naflex"][1], scores["fixed"][1])).max() > 1e-2

