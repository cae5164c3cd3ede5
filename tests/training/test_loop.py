"""The main job end to end on small configs: outputs, resume, fine-tuning, bad input."""

import contextlib
import io
import json
import logging
import os
import pathlib
import shutil

import jax
import numpy as np
import pytest
from PIL import Image
from tensorboard.backend.event_processing import event_accumulator

from conftest import RELEASED_FIXTURES
from helpers import corrupt_jpeg, demo_config, read_metrics, sigterm_at_step
from vit_jax import load_npz, read_class_names, save_npz
from vit_jax.base import errors
from vit_jax.data import device_batches, splits
from vit_jax.data.tf_stack import tf_pipeline
from vit_jax.training import config_defaults as common
from vit_jax.training import loop, objectives, sharding
from vit_jax.training.evaluators import classification
from vit_jax.training.runs import workdir as workdir_lib


def copy_of(demo_run, tmp_path) -> str:
  """A copy of conftest's demo run (read-only), for a test that goes on from it."""
  workdir = tmp_path / "run"
  shutil.copytree(demo_run[0], workdir)
  return str(workdir)


@pytest.fixture(name="resumed_run", scope="module")
def fixture_resumed_run(demo_run, tmp_path_factory):
  """The demo run resumed with more steps and another evaluation interval: (its workdir,
  what it printed). The same program as test_multiprocess's resume to step 8 (the
  interval is not part of it)."""
  workdir = copy_of(demo_run, tmp_path_factory.mktemp("resumed"))
  with contextlib.redirect_stderr(io.StringIO()) as printed:  # the console's stream
    loop.train_and_evaluate(demo_config(total_steps=8, eval_every=4), workdir)
  return pathlib.Path(workdir), printed.getvalue()


def test_demo_run_writes_everything_and_resumes(demo_run, resumed_run):
  workdir, result = str(demo_run[0]), demo_run[1]
  assert result["eval/examples"] == 300  # 300 test digits, batch_eval 128: no remainder lost
  files = os.listdir(workdir)
  assert any(f.startswith("events.out.tfevents") for f in files)
  assert {"metrics.jsonl", "params.npz", "config.json", "checkpoints"} <= set(files)
  assert "6" in os.listdir(os.path.join(workdir, "checkpoints"))
  rows = read_metrics(workdir)
  names = set().union(*rows)
  assert {"train/loss", "train/lr", "train/grad_norm", "train/img_per_sec", "eval/loss",
          "eval/accuracy", "eval/examples"} <= names
  assert [r["step"] for r in rows if "eval/accuracy" in r] == [3, 6]
  module, params = load_npz(os.path.join(workdir, "params.npz"))
  assert module.num_classes == 10 and module.hidden_size == 64
  assert [r["step"] for r in rows if "eval/balanced_accuracy" in r] == [3, 6]
  with open(os.path.join(workdir, "per_class_metrics.json")) as f:
    per_class = json.load(f)
  confusion = np.array(per_class["sets"]["eval/test"]["confusion_matrix"])
  assert per_class["step"] == 6 and confusion.sum() == 300  # every test digit once
  assert np.trace(confusion) / 300 == pytest.approx(result["eval/accuracy"])
  recall = np.diag(confusion) / confusion.sum(1)
  assert result["eval/balanced_accuracy"] == pytest.approx(recall.mean())
  worst = result["eval/worst_classes"]  # by name, lowest recall first
  assert [w["recall"] for w in worst] == pytest.approx(sorted(recall)[:5])
  assert worst[0]["name"] == per_class["class_names"][worst[0]["class"]]
  with open(os.path.join(workdir, "final_metrics.json")) as f:
    assert json.load(f)["eval/worst_classes"] == worst
  assert Image.open(os.path.join(workdir, "confusion_matrix.png")).format == "PNG"
  events = event_accumulator.EventAccumulator(workdir, size_guidance={"tensors": 0})
  events.Reload()
  assert [e.step for e in events.Tensors("eval/confusion_matrix")] == [3, 6]  # an image each

  resumed, printed = resumed_run
  assert "resumed from step 6" in printed
  steps = [r["step"] for r in read_metrics(resumed) if "train/loss" in r]
  assert steps == [2, 4, 6, 8]  # 7 and 8 were trained; 1..6 were not repeated


def write_image_folder(root, classes=("cat", "dog", "fox"), per_class=4):
  rng = np.random.default_rng(0)
  for split in ("train", "test"):
    for c, name in enumerate(classes):
      os.makedirs(root / split / name)
      for i in range(per_class):
        pixels = (rng.uniform(0, 255, (40, 48, 3)) * 0.3 + 80 * c).astype(np.uint8)
        image = Image.fromarray(pixels)
        if i % 3 == 0:
          image.convert("L").save(root / split / name / f"{i}.png")
        elif i % 3 == 1:
          image.save(root / split / name / f"{i}.JPG")
        else:
          image.convert("RGBA").save(root / split / name / f"{i}.Png")


def finetune_config(images):
  """Two steps fine-tuning the released-format ViT-Ti/16 fixture on an image folder."""
  config = demo_config(dataset=str(images), pretrained=str(RELEASED_FIXTURES / "vit-ti16.npz"),
                       total_steps=2, batch=4, batch_eval=5, eval_every=2, checkpoint_every=2)
  with config.unlocked():
    config.model_name = "ViT-Ti_16"
    config.model = common.get_config().model  # the fine-tuning defaults, no demo overrides
    config.pp.update(dict(preset="inception", crop=32, resize=None, flip=True))
    config.optimizer, config.optim_dtype, config.base_lr = "sgd", "bfloat16", 0.01
  return config


def test_finetune_fixture_checkpoint_on_an_image_folder(tmp_path):
  write_image_folder(tmp_path / "images")
  config = finetune_config(tmp_path / "images")
  result = loop.train_and_evaluate(config, str(tmp_path / "run"))
  assert result["eval/examples"] == 12
  module, params = load_npz(tmp_path / "run" / "params.npz")
  assert module.num_classes == 3 and module.hidden_size == 192
  assert read_class_names(tmp_path / "run" / "params.npz") == sorted(os.listdir(
      tmp_path / "images" / "train"))  # the head's labels are the sorted class folders
  assert params["Transformer"]["posembed_input"]["pos_embedding"].shape == (1, 5, 192)


def test_missing_pretrained_file_fails_before_training(tmp_path):
  config = demo_config(pretrained=str(tmp_path / "missing.npz"))
  with pytest.raises(FileNotFoundError, match="missing.npz"):
    loop.train_and_evaluate(config, str(tmp_path / "run"))
  assert not (tmp_path / "run" / "metrics.jsonl").exists()


def test_unknown_dataset_fails_fast(tmp_path):
  with pytest.raises((ValueError, FileNotFoundError)):
    loop.train_and_evaluate(demo_config(dataset=str(tmp_path / "no_such_dir")),
                             str(tmp_path / "run"))


def test_accumulation_must_divide_the_batch(tmp_path):
  with pytest.raises(sharding.ShardingError, match="accum_steps=5 does not divide"):
    loop.train_and_evaluate(demo_config(accum_steps=5), str(tmp_path / "run"))


def test_hyperrule_steps():
  assert [loop.hyperrule_steps(n) for n in (1_000, 50_000, 1_000_000)] == [500, 10_000, 20_000]


def test_freeze_steps_past_the_hyperrule_schedule_is_refused(tmp_path):
  info = tf_pipeline.DatasetInfo(num_classes=10, num_train=1_000, num_eval=100,
                              class_names=[str(i) for i in range(10)])
  lp_ft = dict(total_steps=-1, freeze="^Transformer/")
  config = demo_config(**lp_ft, freeze_steps=499)
  assert loop.resolve_config(config, info, objectives.get(config)).total_steps == 500
  # The digits' 1,497 training images: the HyperRule's 500 steps.
  with pytest.raises(errors.InvalidInput, match=r"config.freeze_steps=500 is not below "
                     r"config.total_steps=500"):
    loop.train_and_evaluate(demo_config(**lp_ft, freeze_steps=500), str(tmp_path / "run"))


def checkpoint_steps(workdir):
  path = os.path.join(workdir, "checkpoints")
  return sorted(int(d) for d in os.listdir(path) if d.isdigit()) if os.path.isdir(path) else []


def snapshot(workdir):
  """Every file in the workdir with its bytes, to tell whether a run wrote anything."""
  return {str(p.relative_to(workdir)): p.read_bytes()
          for p in pathlib.Path(workdir).rglob("*") if p.is_file()}


def test_rerunning_a_finished_run_writes_nothing(demo_run, tmp_path, caplog):
  workdir, first = copy_of(demo_run, tmp_path), demo_run[1]
  before = snapshot(workdir)
  with caplog.at_level(logging.INFO):
    again = loop.train_and_evaluate(demo_config(), workdir)
  assert again == first
  assert f"already finished at step 6; results in {workdir}" in caplog.text
  assert snapshot(workdir) == before  # no hparams row, no events file, same config.json


def test_a_resumed_run_with_changed_settings_keeps_the_original_config(demo_run, resumed_run):
  workdir = resumed_run[0]
  assert (workdir / "config.json").read_text() == (demo_run[0] / "config.json").read_text()
  resumed = json.loads((workdir / "config.resumed-6.json").read_text())
  assert resumed["total_steps"] == 8 and resumed["eval_every"] == 4


@pytest.mark.parametrize("override, message", [
    (dict(total_steps=0), "total_steps=0 must be >= 1"),
    (dict(total_steps=-5), "total_steps=-5 must be >= 1"),
    (dict(batch=0), "batch=0 must be"),
    (dict(batch_eval=-1), "batch_eval=-1 must be"),
    (dict(accum_steps=0), "accum_steps=0 must be"),
    (dict(checkpoint_every=0), "checkpoint_every=0 must be"),
    (dict(eval_every=0), "eval_every=0 must be"),
    (dict(progress_every=0), "progress_every=0 must be"),
    (dict(keep_checkpoints=0), "keep_checkpoints=0 must be"),
    (dict(warmup_steps=-1), "warmup_steps=-1 must be >= 0"),
    (dict(warmup_steps=7), "warmup_steps=7 must be >= 0 and <= config.total_steps=6"),
    (dict(optimizer="adamm"), "unknown config.optimizer='adamm'"),
    (dict(decay_type="cosin"), "unknown config.decay_type='cosin'"),
    (dict(dtype="bf16"), "unknown config.dtype='bf16'"),
    (dict(polyak_decay=1.0), "polyak_decay=1.0 must be in \\[0, 1\\)"),
    (dict(mesh=dict(data=1, fsdp=1, tensor=3)), "has 3 devices but 1 are available"),
    (dict(model=dict(attention="fused")), "unknown model option\\(s\\) attention"),
    (dict(model=dict(dropout_rate=1.5)), r"config.model: dropout_rate=1.5 must be in \[0, 1\)"),
    (dict(label_smoothing=2.0), r"config.label_smoothing=2.0 must be in \[0, 1\)"),
    (dict(grad_norm_clip=-1.0), "grad_norm_clip=-1.0 must be > 0, or 0 / None to turn"),
    (dict(base_lr=-0.01), "config.base_lr=-0.01 must be >= 0"),
    (dict(base_lr=float("nan")), "config.base_lr=nan must be >= 0"),
    (dict(adam_b2=1.0), r"config.adam_b2=1.0 must be in \[0, 1\)"),
    (dict(seed=-5), "config.seed=-5 must be a whole number >= 0"),
    (dict(pp=dict(crop=18)), "pp.crop=18 must be a multiple of the model's 4 px patches: use 16 "
     "or 20"),
    (dict(pp=dict(crop=0)), "pp.crop=0 must be a multiple of the model's 4 px patches: use 4$"),
    (dict(pp=dict(mixup_alpha=0.2), batch=33), "mixup_alpha=0.2 mixes pairs of rows: the batch "
     "per process, 33 .* must be even"),
    (dict(pp=dict(mixup_alpha=float("nan"))), "pp.mixup_alpha=nan must be >= 0 and finite"),
    (dict(pp=dict(randaug=(2,))), r"config.pp.randaug=\(2,\) must be None \(off\) or a pair"),
    (dict(freeze="."), "config.freeze='.' freezes every parameter: nothing would train"),
    (dict(model_name="SigLIP2-B_16"), "^config.model_name=SigLIP2-B_16 names a two-tower "
     r"\(image-text\) model, .* --config=configs/siglip2_b16.py --config.pretrained="
     "SigLIP2-B_16-224; to classify zero-shot, python -m vit_jax.zeroshot "),  # not 'ViT-B_16?'
], ids=lambda x: "-".join(map(str, x.items())) if isinstance(x, dict) else None)
def test_bad_config_is_refused_before_anything_is_written(tmp_path, override, message):
  workdir = tmp_path / "run"
  with pytest.raises(ValueError, match=message) as e:
    loop.train_and_evaluate(demo_config(**override), str(workdir))
  assert "\n" not in str(e.value)
  assert not workdir.exists()


@pytest.mark.parametrize("text", ["None", "none", ""])
def test_pretrained_none_from_the_command_line_means_from_scratch(text):
  config = demo_config(pretrained=text)  # what --config.pretrained=None passes on
  loop.check_config(config, sharding.make_mesh(config.mesh), objectives.get(config))
  assert config.pretrained is None
  config.pretrained = "None.npz"
  with pytest.raises(FileNotFoundError, match="config.pretrained=None.npz: .* not found"):
    loop.check_config(config, sharding.make_mesh(config.mesh), objectives.get(config))


def test_a_failure_after_the_checks_removes_the_workdir_it_created(tmp_path):
  workdir = tmp_path / "run"
  with pytest.raises(ValueError):
    loop.train_and_evaluate(demo_config(dataset=str(tmp_path)), str(workdir))  # no train/
  assert not workdir.exists()


def test_an_lr_mults_regex_matching_nothing_is_refused_before_any_write(tmp_path):
  """The regex is checked against the parameters when the optimizer state is made, not at
  the first update (after config.json, dataset.json and the event file were written)."""
  workdir = tmp_path / "run"
  with pytest.raises(errors.InvalidInput, match="config.lr_mults='nomatch' matches no "
                     "parameter; paths look like"):
    loop.train_and_evaluate(demo_config(lr_mults=(("nomatch", 2.0),)), str(workdir))
  assert not workdir.exists()


def test_a_workdir_url_that_cannot_hold_a_run_is_refused_first():
  with pytest.raises(workdir_lib.WorkdirError, match="^--workdir=memory://x/run: memory:// "
                     "cannot hold a run"):
    loop.train_and_evaluate(demo_config(), "memory://x/run")


def test_preprocessing_is_refused_before_the_workdir_lock(tmp_path):
  """A bad config.pp names itself, not the lock another job holds (the static gate runs
  before any lock or download)."""
  workdir = tmp_path / "run"
  workdir.mkdir()
  with workdir_lib.WorkdirLock(str(workdir)):
    with pytest.raises(ValueError, match="unknown config.pp.preset='incept'; choose one of"):
      loop.train_and_evaluate(demo_config(pp=dict(preset="incept")), str(workdir))


def test_a_second_run_on_a_busy_workdir_is_refused(tmp_path):
  workdir = tmp_path / "run"
  workdir.mkdir()
  with workdir_lib.WorkdirLock(str(workdir)):  # held by "another" job
    with pytest.raises(workdir_lib.WorkdirError, match="in use by another run"):
      loop.train_and_evaluate(demo_config(), str(workdir))
  assert os.listdir(workdir) == []


def test_a_corrupt_eval_image_keeps_the_steps_trained_so_far(tmp_path, caplog):
  # Ten classes of 16 px images: the shared demo programs (helpers.DEMO_SETTINGS).
  write_image_folder(tmp_path / "images", classes=("dog", *"abcdefghi"), per_class=2)
  bad = tmp_path / "images" / "test" / "dog" / "1.JPG"
  good = bad.read_bytes()
  bad.write_bytes(corrupt_jpeg())
  workdir = str(tmp_path / "run")
  config = demo_config(dataset=str(tmp_path / "images"), eval_every=2, checkpoint_every=100)
  with pytest.raises(splits.CorruptImageError, match=f"corrupt image {bad}"):
    loop.train_and_evaluate(config, workdir)
  assert checkpoint_steps(workdir) == [2]  # the first evaluation failed after step 2
  bad.write_bytes(good)
  with caplog.at_level(logging.INFO):
    result = loop.train_and_evaluate(config, workdir)
  assert "resumed from step 2" in caplog.text and result["eval/examples"] == 20


def test_a_pretrained_file_with_nan_weights_is_refused_unless_allowed(demo_run, tmp_path):
  params = load_npz(demo_run[0] / "params.npz")[1]
  params["Transformer"]["encoder_norm"]["scale"][0] = np.nan
  save_npz(params, tmp_path / "nan.npz", allow_nonfinite=True)
  config = demo_config(pretrained=str(tmp_path / "nan.npz"))  # the demo run's programs
  with pytest.raises(ValueError, match="NaN/Inf weights in 1 of .*: Transformer/encoder_norm/"
                     "scale .*allow_nonfinite_pretrained=True"):
    loop.train_and_evaluate(config, str(tmp_path / "run"))
  assert not (tmp_path / "run").exists()
  config.allow_nonfinite_pretrained = True
  with pytest.raises(FloatingPointError, match="is nan at step 1"):
    loop.train_and_evaluate(config, str(tmp_path / "run"))


def polyak_config():
  """A short demo run with a Polyak average, cut to one block: the average makes its
  programs its own anyway, and one block compiles fastest."""
  config = demo_config(polyak_decay=0.9, total_steps=4, eval_every=4, checkpoint_every=4)
  config.model.num_layers = 1
  return config


def test_polyak_averaging_evaluates_exports_and_resumes_exactly(tmp_path, monkeypatch):
  straight, resumed = tmp_path / "straight", tmp_path / "resumed"
  result = loop.train_and_evaluate(polyak_config(), str(straight))
  assert {"eval/accuracy", "eval_raw/accuracy", "eval_raw/loss"} <= set(result)
  assert result["eval/loss"] != result["eval_raw/loss"]  # two different parameter sets
  with monkeypatch.context() as patch:  # stopped after step 2 (the same compiled program)
    patch.setattr(device_batches, "prefetch_to_device", sigterm_at_step(2))
    stopped = loop.train_and_evaluate(polyak_config(), str(resumed))
  assert stopped["preempted_at_step"] == 2
  loop.train_and_evaluate(polyak_config(), str(resumed))  # resumes at step 2
  exported = dict(np.load(straight / "params.npz"))
  for key, value in np.load(resumed / "params.npz").items():
    np.testing.assert_array_equal(value, exported[key], err_msg=key)
  # params.npz holds the average (what eval/* measured), not the raw parameters.
  module, params = load_npz(straight / "params.npz")
  mesh = sharding.make_mesh({"data": 1}, jax.devices()[:1])
  evaluator = classification.Evaluator(demo_config(), module, mesh,
                                       tf_pipeline.open_dataset(demo_config()))
  exported_eval = evaluator(jax.device_put(params, sharding.replicated(mesh)), step=4)
  assert exported_eval["eval/loss"] == pytest.approx(result["eval/loss"], rel=1e-5)
  last_eval = [r for r in read_metrics(straight) if "eval/loss" in r][-1]
  assert last_eval["eval_raw/loss"] == result["eval_raw/loss"]


def test_the_demo_trains_with_fp8_dense_layers_and_writes_the_same_parameters(demo_run,
                                                                              tmp_path):
  """config.model.fp8: the main job trains (the loss falls as in float32, FP8 rounding
  aside) and params.npz has the float32 run's names and shapes."""
  config = demo_config(total_steps=12, eval_every=12)
  with config.unlocked():
    config.model.fp8 = True
  result = loop.train_and_evaluate(config, str(tmp_path / "run"))
  losses = [row["train/loss"] for row in read_metrics(tmp_path / "run") if "train/loss" in row]
  assert np.isfinite(result["eval/loss"]) and losses[-1] < losses[0]
  _, fp8_params = load_npz(tmp_path / "run" / "params.npz")
  _, params = load_npz(demo_run[0] / "params.npz")
  assert jax.tree.map(np.shape, fp8_params) == jax.tree.map(np.shape, params)
