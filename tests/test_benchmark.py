"""The benchmark command: its table, JSON rows, --config and one-line mistakes."""

import functools
import json

import jax
import pytest
from absl import flags

import helpers

from vit_jax import benchmark
from vit_jax.base import cli, storage
from vit_jax.families.vit import names as zoo
from vit_jax.models import family_registry
from vit_jax.planning import model_flops, step_timing
from vit_jax.training import objectives


def run_command(*args):
  """`python -m vit_jax.benchmark ARGS` in this process: the command's flags on their own
  FlagValues, parsed and ended by vit_jax.base.cli as cli.run does (a mistake: one line, exit 2)."""
  argv = ["benchmark", *args]  # config_flags defines a --config.KEY flag per override in it
  flag_values = flags.FlagValues()
  cli.define_or_exit(functools.partial(benchmark.define_flags, sys_argv=argv), flag_values)
  cli.with_exit_codes(benchmark.main)(cli.parse_flags(argv, flag_values), flag_values)


def table(printed: str) -> dict:
  """The last row of the printed table, by column name."""
  lines = printed.splitlines()
  header = next(line for line in lines if line.startswith("model"))
  return dict(zip(header.split(), lines[-1].split()))


def test_cli_writes_a_table_and_json(tmp_path, capsys):
  out = tmp_path / "results.jsonl"
  run_command("--model=Ti/16", "--mode=infer", "--batch=2", "--image-size=32",
              "--steps=3", f"--json={out}", "--peak_tflops=1")
  row = table(capsys.readouterr().out)
  # The columns docs/speed.md lists.
  assert (row["model"], row["size"]) == ("ViT-Ti_16", "32") and float(row["compile_s"]) > 0
  assert float(row["min_s"]) <= float(row["median_s"]) <= float(row["max_s"])
  assert float(row["img/s/dev"]) == pytest.approx(float(row["img/s"]) / jax.device_count(),
                                                  rel=0.01)
  assert float(row["GFLOP"]) > 0 and row["MFU"].endswith("%") and float(row["MiB/dev"]) > 0
  result = json.loads(out.read_text())
  assert result["peak_tflops_per_device"] == 1 and result["image_size"] == 32


def test_every_flag_has_a_help_string_and_the_models_are_listed():
  flag_values = flags.FlagValues()
  benchmark.define_flags(flag_values)
  assert all(flag_values[name].help for name in flag_values)
  assert all(name in benchmark.__doc__ for name in zoo.RELEASED)  # what --help prints first


@pytest.mark.parametrize("flag, problem", [("--model=ViT-X_16", "did you mean ViT-S_16"),
                                           ("--batch=0", "--batch=0: 0 is not a positive integer"),
                                           ("--image-size=0", "0 is not a positive integer"),
                                           ("--steps=-1", "-1 is not a non-negative integer"),
                                           ("--mesh=data=-1,foo=2", "unknown mesh axis foo"),
                                           ("--mesh=data", "--mesh=data is not AXIS=SIZE"),
                                           ("nonsense", "unexpected arguments: nonsense"),
                                           ("--image_size=7", "--image_size=7 is smaller than "
                                            "ViT-B_16's 16 px patches: use 16 or more"),
                                           ("--peak_tflops=-1",
                                            "-1.0 is not a non-negative number"),
                                           ("--peak_tflops=nan", "'nan' is not a finite number"),
                                           ("--json=-", "--json=- would mix JSON into the table"),
                                           ("--json=/tmp", "--json=/tmp is a directory")])
def test_bad_arguments_are_one_error_line(capsys, flag, problem):
  with pytest.raises(SystemExit) as exit_info:
    run_command(flag)
  captured = capsys.readouterr()
  assert exit_info.value.code == 2 and not captured.out
  assert captured.err.startswith("error: ") and captured.err.count("\n") == 1
  assert problem in captured.err


def test_mesh_argument():
  assert benchmark.parse_mesh("data=-1,fsdp=2") == {"data": -1, "fsdp": 2}


def test_compile_only_with_scan(capsys):
  run_command("--model=ViT-Ti_16", "--mode=train", "--batch=2", "--image-size=32",
              "--steps=0", "--scan", "--peak_tflops=1")
  row = table(capsys.readouterr().out)
  assert (row["model"], row["mode"]) == ("ViT-Ti_16", "train") and float(row["compile_s"]) > 0
  assert {row[name] for name in ("median_s", "min_s", "max_s", "img/s", "img/s/dev")} == {"-"}
  assert float(row["GFLOP"]) > 0  # no step time or img/s; FLOPs known


def test_out_of_memory_is_a_row_and_the_suite_goes_on(tmp_path, capsys, monkeypatch):
  calls, real_run = [], step_timing.run

  def fake_run(model, mode, *args, **kwargs):
    calls.append((model, mode))
    if len(calls) == 1:
      raise jax.errors.JaxRuntimeError("RESOURCE_EXHAUSTED: Out of memory allocating 3e10 bytes.")
    return real_run("ViT-Ti_16", "infer", batch=2, image_size=32, steps=1, num_layers=1,
                         peak_flops=1e12)

  monkeypatch.setattr(step_timing, "run", fake_run)
  monkeypatch.setattr(benchmark, "SUITE", [("ViT-L_16", "train", 384), ("ViT-Ti_16", "infer", 32)])
  out = tmp_path / "suite.jsonl"
  run_command("--suite", "--batch=2", f"--json={out}")
  printed = capsys.readouterr().out
  oom = [line for line in printed.splitlines() if "out of memory" in line]
  assert len(oom) == 1 and oom[0].split()[:5] == ["ViT-L_16", "train", "384", "2", "float32"]
  rows = [json.loads(line) for line in out.read_text().splitlines()]
  assert rows[0]["error"] == "out of memory" and rows[1]["img_per_sec"] > 0
  assert len(calls) == 2


def test_config_times_exactly_the_configs_step(tmp_path, capsys, monkeypatch):
  """--config takes the model, its fast paths, batch, crop, dtype, mesh, accumulation and
  optimizer from a training config (plus --config.KEY overrides), as vit_jax.main would."""
  seen = {}
  real_step_function = step_timing.step_function

  def spy(module, mode, mesh, batch, image_size, config):
    seen.update(module=module, batch=batch, image_size=image_size, config=config)
    return real_step_function(module, mode, mesh, batch, image_size, config)

  monkeypatch.setattr(step_timing, "step_function", spy)
  out = tmp_path / "results.jsonl"
  run_command("--config=configs/demo.py", "--config.batch=16", "--config.accum_steps=2",
              "--config.model.remat_policy=full", "--config.model.num_layers=1", "--steps=2",
              "--peak_tflops=1", f"--json={out}")  # 1 block of 4: the step compiles faster
  printed = capsys.readouterr().out
  assert "ViT-Ti_16 train, batch 16 in 2 micro-batch(es), 16 px, float32" in printed
  row = table(printed)
  assert (row["model"], row["size"], row["batch"]) == ("ViT-Ti_16", "16", "16")
  result = json.loads(out.read_text())
  assert result["accum_steps"] == 2 and result["remat_policy"] == "full"
  module = seen["module"]
  assert (module.num_layers, module.hidden_size, module.patch_size) == (1, 64, 4)
  assert module.num_classes == 10  # the digits' classes, from the dataset's metadata
  assert seen["config"].optimizer == "adamw" and seen["config"].accum_steps == 2


def test_a_contrastive_config_is_timed_in_pairs_over_both_towers(tmp_path, capsys):
  """configs/siglip_demo.py's step (an image tower, a text tower, the chunked sigmoid loss):
  pairs/s, and MFU over both towers' FLOPs with the image tower locked (LiT: counted
  forward only, the text tower three times)."""
  out = tmp_path / "results.jsonl"
  run_command(*helpers.pair_args(freeze="^img/"), "--steps=2", "--peak_tflops=1",
              f"--json={out}")
  printed = capsys.readouterr().out
  assert "objective contrastive (sigmoid loss, chunked; text tower transformer, 1 blocks of " \
      "32, 8 tokens)" in printed
  assert "pairs/s" in printed.splitlines()[2] and "img/s" not in printed.splitlines()[2]
  row = table(printed)
  assert (row["model"], row["batch"]) == ("ViT-Ti_16+transformer", "64")
  result = json.loads(out.read_text())
  assert result["example"] == "pair" and result["pairs_per_sec"] == result["img_per_sec"] > 0
  config = helpers.pair_config()
  module, _ = objectives.get(config).create_model(config, 0, load_pretrained=False)
  parts = model_flops.forward_by_part(module, config)
  assert result["gflop_per_image"] * 1e9 == pytest.approx(parts["img"] + 3 * parts["txt"])
  assert result["mfu"] == pytest.approx(
      result["gflop_per_image"] * 1e9 * result["img_per_sec"] / 1e12)


def test_a_naflex_config_is_timed_at_its_patch_budget(tmp_path, capsys):
  """config.pp.max_patches: the step's synthetic batch is batch_spec's NaFlex image (every
  patch of the budget real), the row's size is the budget and the FLOPs count it."""
  out = tmp_path / "naflex.jsonl"
  run_command("--config=configs/naflex_demo.py", "--config.batch=8", "--config.pp.max_patches=9",
              "--config.model.num_layers=1", "--steps=1", "--peak_tflops=1", f"--json={out}")
  printed = capsys.readouterr().out
  assert "ViT-Ti_16 train, batch 8 in 1 micro-batch(es), NaFlex at most 9 patches" in printed
  assert table(printed)["size"] == "9p"
  result = json.loads(out.read_text())
  assert result["max_patches"] == 9 and result["img_per_sec"] > 0
  module = family_registry.create_model("ViT-Ti_16", num_classes=10, patch_size=4,
                                        hidden_size=64, mlp_dim=128, num_heads=4, num_layers=1,
                                        classifier="map")
  forward = family_registry.geometry(module).flops_per_image(module, 16, 9)
  assert result["gflop_per_image"] * 1e9 == 3 * forward


@pytest.mark.parametrize("argv, problem", [
    (["--config=configs/demo.py", "--batch=8"], "--batch cannot go with --config"),
    (["--config=configs/demo.py", "--image-size=32", "--scan"],
     "--image_size --scan cannot go with --config"),
    (["--config=configs/demo.py", "--config.bach=8"],
     "no config key 'bach' Did you mean \"batch\""),
    (["--config=configs/nope.py"], "cannot load --config: "),
    (["--config=configs/demo.py", "--config.batch=7", "--config.accum_steps=2"],
     "config.accum_steps=2 does not divide config.batch=7"),
    (["--config.batch=8"], "Unknown command line flag 'config.batch'"),
])
def test_config_mistakes_are_one_error_line(capsys, argv, problem):
  with pytest.raises(SystemExit) as exit_info:
    run_command(*argv)
  assert exit_info.value.code == 2
  err = capsys.readouterr().err
  assert err.startswith("error: ") and problem in err and err.count("\n") == 1


def test_a_batch_too_big_for_memory_is_the_same_row_on_the_model_path(capsys):
  """A real allocation failure (1.2 TB of images), not a faked one: XLA reports it as
  'INTERNAL: ... Out of memory allocating', not RESOURCE_EXHAUSTED. The model and size of
  test_cli_writes_a_table_and_json: the compiled init of the params is that one (XLA's
  persistent cache), ~7 s of compiling less."""
  run_command("--model=ViT-Ti_16", "--batch=100000000", "--image_size=32", "--mode=infer",
              "--steps=1", "--peak_tflops=1")
  rows = capsys.readouterr().out.splitlines()
  assert rows[-1].split()[:5] == ["ViT-Ti_16", "infer", "32", "100000000", "float32"]
  assert rows[-1].endswith("out of memory (try --remat=full, --dtype=bfloat16 or a smaller "
                           "batch)")


def test_json_rows_go_to_a_gs_file_without_appends(gcs, capsys, monkeypatch):
  """--json=gs://...: the file is uploaded whole after each row (objects cannot be
  appended to), so it holds every row measured so far."""
  def out_of_memory(*args, **kwargs):
    raise jax.errors.JaxRuntimeError("RESOURCE_EXHAUSTED: Out of memory allocating 3e10 bytes.")

  monkeypatch.setattr(step_timing, "run", out_of_memory)
  monkeypatch.setattr(benchmark, "SUITE", [("ViT-L_16", "train", 384), ("ViT-B_16", "infer", 224)])
  out = f"gs://{gcs.bucket}/bench/suite.jsonl"
  run_command("--suite", "--batch=2", f"--json={out}")
  rows = [json.loads(line) for line in storage.read_text(out).splitlines()]
  assert [(row["model"], row["error"]) for row in rows] == [("ViT-L_16", "out of memory"),
                                                            ("ViT-B_16", "out of memory")]


@pytest.fixture(name="siglip_file")
def fixture_siglip_file(tmp_path):
  # pylint: disable=import-outside-toplevel
  import two_tower_helpers
  from vit_jax.families.two_tower import npz_file as two_tower_load
  model = two_tower_helpers.tiny_siglip()
  path = str(tmp_path / "siglip.npz")
  two_tower_load.save_two_tower(two_tower_helpers.random_params(model, 8), path)
  return path


def test_a_two_tower_model_is_timed_tower_by_tower(siglip_file, tmp_path, capsys):
  out = tmp_path / "towers.jsonl"
  run_command(f"--model={siglip_file}", "--batch=2", "--steps=2", "--peak_tflops=1",
              f"--json={out}")
  printed = capsys.readouterr().out
  rows = [json.loads(line) for line in out.read_text().splitlines()]
  assert [(r["model"], r["mode"], r["image_size"]) for r in rows] == [
      ("image tower", "infer", 32), ("text tower", "infer", 8)]  # the file's size, 8 tokens
  assert all(r["gflop_per_image"] > 0 and r["mib_per_device"] > 0 and r["img_per_sec"] > 0
             for r in rows)
  assert "siglip" in printed and table(printed)["model"] == "text"


@pytest.mark.parametrize("flags_, problem", [
    (["--mode=train"], "drop --mode=train (a pair's training step is timed from its training "
                       "config: --config=FILE)"), (["--remat=full"], "drop --remat"),
    (["--config=configs/demo.py"], "drop --config")])
def test_two_tower_mistakes_are_one_error_line(siglip_file, capsys, flags_, problem):
  with pytest.raises(SystemExit) as exit_info:
    run_command(f"--model={siglip_file}", *flags_)
  captured = capsys.readouterr()
  assert exit_info.value.code == 2 and captured.err.count("\n") == 1 and problem in captured.err


@pytest.fixture(name="pair_file")
def fixture_pair_file(tmp_path):
  """A checkpoint of a test family timed part by part (tests/export/functions_family.py)."""
  import functions_family  # pylint: disable=import-outside-toplevel
  path = str(tmp_path / f"model{functions_family.SUFFIX}")
  functions_family.write_checkpoint(path)
  functions_family.register()
  yield path
  functions_family.unregister()


def test_a_checkpoint_timed_part_by_part_gets_the_parts_its_family_declares(pair_file, tmp_path,
                                                                            capsys):
  out = tmp_path / "parts.jsonl"
  run_command(f"--model={pair_file}", "--batch=2", "--steps=1", "--peak_tflops=1",
              f"--json={out}")
  printed = capsys.readouterr().out
  rows = [json.loads(line) for line in out.read_text().splitlines()]
  assert [(r["model"], r["mode"], r["image_size"], r["family"]) for r in rows] == [
      ("project", "infer", 2, "pair"), ("lookup", "infer", 5, "pair")]
  assert f"{pair_file} (pair), its two functions on one device" in printed
  with pytest.raises(SystemExit):
    run_command(f"--model={pair_file}", "--mode=train")
  assert capsys.readouterr().err.strip() == (
      f"error: --model={pair_file} is a pair-of-functions model, timed as its two functions on "
      "one device: drop --mode=train (the main job trains no pair-of-functions model) (--help "
      "shows the usage)")


def test_a_released_two_tower_name_not_downloaded_is_refused(capsys, tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)  # checkpoints/ holds nothing here
  with pytest.raises(SystemExit) as exit_info:
    run_command("--model=SigLIP2-B_16-224")
  captured = capsys.readouterr()
  assert exit_info.value.code == 1 and "python -m vit_jax.download SigLIP2-B_16-224" in captured.err
