"""Throughput of the real train step or inference on synthetic data: img/s and MFU.

  python -m vit_jax.benchmark --model=ViT-B_16 --mode=train --batch=256 --dtype=bfloat16
  python -m vit_jax.benchmark --config=configs/vit_b16.py:cifar10 --config.batch=256
  python -m vit_jax.benchmark --suite --json=results.jsonl
  python -m vit_jax.benchmark --model=CHECKPOINT --batch=32   # timed part by part (below)

--config=FILE[:ARG] (with any --config.KEY=VALUE override, as for vit_jax.main) times
exactly the step a training config runs: its model and fast paths (attention, remat,
scan), batch (batch_eval for --mode=infer), crop, dtype, mesh, gradient accumulation and
optimizer; the head has the dataset's class count (from its metadata, no data read). So
"how fast will my run be" is one line, and main's train/img_per_sec compares with it.

Compile time is excluded from the step times and reported on its own. MFU divides
model FLOPs (analytic, cross-checked with XLA's cost analysis) by a peak measured on the
spot with a large matmul in the same dtype (or --peak_tflops).

Table columns: size (the crop in px; NaFlex, config.pp.max_patches: the patch budget, 576p,
every patch of it real), compile_s (compile time), median_s / min_s / max_s (step time over
the timed steps), img/s (batch / median step, all devices) and img/s/dev (per device),
GFLOP (model FLOPs per image: 3x the forward for training; XLA's count, also in the JSON
as xla_gflop_per_image, for hybrids), MFU, MiB/dev (device memory: arguments, outputs and
temporaries of the compiled step). `-`: not measured (--steps=0). A contrastive config
(an image tower and a text tower) is timed per image-caption pair: pairs/s and pairs/s/dev
(also pairs_per_sec in the JSON), GFLOP per pair over both towers (a locked tower counted
forward only), the model column its image model + text tower:

  python -m vit_jax.benchmark --config=configs/siglip_demo.py

--model may also name a checkpoint (.npz, Hugging Face folder or downloaded released name)
of a family that is timed part by part (listed below): each part's inference on one device,
one row each (size: the part's input side or length; img/s: items per second).
"""

import json
import textwrap
import time
from typing import Dict, List, Optional

import jax
import jax.numpy as jnp
import ml_collections
from absl import flags
from ml_collections import config_flags

from vit_jax.base import cli, errors, storage
from vit_jax.data import batch_spec
from vit_jax.models import attention, encoder_blocks
from vit_jax.families.vit import names as zoo
from vit_jax.models import family_registry
from vit_jax.planning import part_timing, step_timing
from vit_jax.training import objectives, pretrained_file, sharding

__doc__ += "\nmodels (--model):\n" + textwrap.fill(  # in --help: absl's wrap splits ViT-|L_16
    ", ".join(zoo.RELEASED), width=90, break_on_hyphens=False, initial_indent="  ",
    subsequent_indent="  ") + "\n\ntimed part by part (--model=CHECKPOINT):\n" + "".join(
        f"  {family.title}: {family.benchmark_parts.timed}\n"
        for family in family_registry.families() if family.benchmark_parts is not None)
FLAGS = flags.FLAGS
SUITE = [(model, mode, size) for model in ("ViT-Ti_16", "ViT-B_16", "ViT-L_16")
         for size in (224, 384) for mode in ("train", "infer")]
# Flags that --config replaces (its model, batch, crop, dtype, mesh and fast paths).
CONFIG_REPLACES = ("model", "batch", "image_size", "dtype", "mesh", "attention",
                   "padded_inference", "remat", "scan", "fp8", "suite")
# What a model timed part by part cannot take: the classifier's training step and fast paths.
PARTS_REFUSE = ("config", "suite", "mesh", "attention", "padded_inference", "remat", "scan",
                "fp8")


def _number(value: Optional[float], spec: str) -> str:
  return "-" if value is None else format(value, spec)


# (header, result key, format, width) of the measured columns, after _key_columns.
COLUMNS = (("compile_s", "compile_s", ".1f", 9), ("median_s", "step_s_median", ".4f", 8),
           ("min_s", "step_s_min", ".4f", 8), ("max_s", "step_s_max", ".4f", 8),
           ("img/s", "img_per_sec", ".1f", 9), ("img/s/dev", "img_per_sec_per_device", ".1f", 9),
           ("GFLOP", "gflop_per_image", ".1f", 7), ("MFU", "mfu", ".1%", 6),
           ("MiB/dev", "mib_per_device", ".0f", 8))


def _key_columns(model, mode, size, batch, dtype) -> str:
  """What was measured: the first columns of a row, an out-of-memory line or the header."""
  return f"{model:<12} {mode:<5} {size:>4} {batch:>5} {dtype:<8}"


def columns(example: str = "image"):
  """COLUMNS, the rate's named for what one example is: img/s, or pairs/s for an
  image-text pair (step_timing.measure's `example`)."""
  if example != "pair":
    return COLUMNS
  named = [(name.replace("img/", "pairs/"), key, spec, width) for name, key, spec, width
           in COLUMNS]
  return tuple((name, key, spec, max(width, len(name))) for name, key, spec, width in named)


def format_row(r: dict) -> str:
  size = f"{r['max_patches']}p" if r.get("max_patches") else r["image_size"]  # NaFlex: budget
  return " ".join([_key_columns(r["model"], r["mode"], size, r["batch"], r["dtype"])]
                  + [f"{_number(r[key], spec):>{width}}"
                     for _, key, spec, width in columns(r.get("example", "image"))])


def header(example: str = "image") -> str:
  return " ".join([_key_columns("model", "mode", "size", "batch", "dtype")]
                  + [f"{name:>{width}}" for name, _, _, width in columns(example)])


HEADER = header()


def parse_mesh(text: str) -> Dict[str, int]:
  """'data=-1,fsdp=2' -> {'data': -1, 'fsdp': 2}."""
  try:
    return {k.strip(): int(v) for k, v in (part.split("=") for part in text.split(",") if part)}
  except ValueError:
    raise cli.UsageError(f"--mesh={text} is not AXIS=SIZE[,AXIS=SIZE...]: use e.g. "
                         "data=-1,fsdp=2") from None


def define_config_flag(flag_values: flags.FlagValues, sys_argv=None) -> None:
  """--config=FILE[:ARG], and a --config.KEY flag for each override in sys_argv (default:
  sys.argv's), as vit_jax.main defines them."""
  config_flags.DEFINE_config_file(
      "config", None, "Time the step of this training config (configs/*.py[:arg]) instead of "
      f"--{', --'.join(CONFIG_REPLACES[:-1])}; override its values with --config.KEY=VALUE.",
      flag_values=flag_values, lock_config=True, sys_argv=sys_argv)


def define_flags(flag_values: flags.FlagValues = FLAGS, sys_argv=None) -> None:
  """The command's flags; not defined on import, so importers' flags stay their own.
  sys_argv: the command line to be parsed, if not sys.argv (see define_config_flag)."""
  define = dict(flag_values=flag_values)
  flags.DEFINE_string("model", "ViT-B_16", "Model to time: a name listed under 'models' "
                      "above, an AugReg short name (B_16) or the paper's notation (ViT-B/16); "
                      "or a checkpoint timed part by part (.npz, folder or downloaded name).",
                      **define)
  flags.DEFINE_enum("mode", "train", ("train", "infer"), "train: the real train step "
                    "(forward, backward, SGD update); infer: the forward pass only.", **define)
  flags.DEFINE_integer("batch", 8, "Global batch, split over the mesh's data axes.",
                       lower_bound=1, **define)
  flags.DEFINE_integer("image_size", 224, "Input side in pixels.", lower_bound=1, **define)
  flags.DEFINE_alias("image-size", "image_size", **define)
  flags.DEFINE_enum("dtype", "float32", ("float32", "bfloat16"), "Compute dtype; params stay "
                    "float32.", **define)
  flags.DEFINE_integer("steps", 10, "Timed steps after compilation; 0: compile only.",
                       lower_bound=0, **define)
  flags.DEFINE_string("mesh", "data=-1", "Device mesh as AXIS=SIZE,... over data, fsdp, "
                      "tensor; -1: all remaining devices.", **define)
  flags.DEFINE_enum("attention", "dot_product", attention.ATTENTION_IMPLS,
                    "Attention implementation.", **define)
  flags.DEFINE_boolean("padded_inference", False, "cuDNN attention: pad odd token counts in "
                       "the forward pass too, as gradients need (default: --mode=infer runs it "
                       "unpadded).", **define)
  flags.DEFINE_enum("remat", "none", tuple(encoder_blocks.REMAT_POLICIES), "Per-block "
                    "rematerialisation policy.", **define)
  flags.DEFINE_boolean("scan", False, "nn.scan over the blocks: one compiled block, faster "
                       "compiles.", **define)
  flags.DEFINE_boolean("fp8", False, "FP8 matmuls in the encoder blocks' dense layers "
                       "(vit_jax.models.fp8).", **define)
  cli.define_finite_float("peak_tflops", None, "Device peak TFLOP/s for MFU instead of "
                          "measuring a matmul (0: measure).", flag_values, lower_bound=0)
  define_config_flag(flag_values, sys_argv)
  flags.DEFINE_boolean("suite", False, "ViT-Ti/B/L_16 at 224 and 384 px, train and infer, "
                       "instead of --model/--mode/--image_size.", **define)
  cli.define_finite_float("time_budget", 1800, "Seconds after which --suite skips the "
                          "remaining configurations.", flag_values)
  flags.DEFINE_string("json", None, "Append one JSON object per configuration to this file.",
                      **define)


def load_config(path: str, overrides: List[str]) -> ml_collections.ConfigDict:
  """A training config as vit_jax.main loads it: FILE[:ARG], then --config.KEY=VALUE; one
  that does not load ends the process in one line (exit 2), as on the command line."""
  argv = ["benchmark", f"--config={path}", *overrides]
  flag_values = flags.FlagValues()
  define_config_flag(flag_values, sys_argv=argv)
  cli.parse_flags(argv, flag_values)
  return pretrained_file.with_budget(cli.load_config(flag_values))


def command_line_config(flag_values: flags.FlagValues) -> Optional[ml_collections.ConfigDict]:
  """The --config of the command line, or None; a flag it replaces is a usage mistake."""
  if not flag_values["config"].present:
    return None
  replaced = [f"--{name}" for name in CONFIG_REPLACES if flag_values[name].present]
  if replaced:
    raise cli.UsageError(f"{' '.join(replaced)} cannot go with --config, which sets the "
                         "model, batch, size, dtype, mesh and fast paths: override them with "
                         "--config.KEY=VALUE")
  return pretrained_file.with_budget(cli.load_config(flag_values))


def parts_main(flag_values: flags.FlagValues, family) -> None:
  """--model=CHECKPOINT of a family timed part by part: each part's inference, a row each."""
  timed = family.benchmark_parts.timed
  refused = [f"--{name}" for name in PARTS_REFUSE if flag_values[name].present]
  if flag_values.mode == "train" and flag_values["mode"].present:
    refused.append("--mode=train (" + ("a pair's training step is timed from its training "
                                       "config: --config=FILE" if family.pair_training
                                       else f"the main job trains no {family.title} model")
                   + ")")
  if refused:
    raise cli.UsageError(f"--model={flag_values.model} is {family.a_title} model, timed as "
                         f"{timed} on one device: drop {', '.join(refused)}")
  if flag_values.json == "-" or (flag_values.json and storage.isdir(flag_values.json)):
    raise cli.UsageError(f"--json={flag_values.json}: name a file to append the JSON lines to")
  batch, dtype = flag_values.batch, flag_values.dtype
  opened = family.benchmark_parts.load(
      flag_values.model, batch=batch, dtype=dtype,
      image_size=flag_values.image_size if flag_values["image_size"].present else None)
  peak = flag_values.peak_tflops * 1e12 if flag_values.peak_tflops else None
  print(f"{jax.devices()[0].device_kind}, jax {jax.__version__}: {flag_values.model} "
        f"({opened.kind}), {timed} on one device")
  print(HEADER)
  for part in opened.parts:
    key = dict(model=part.name, mode="infer", batch=batch, image_size=part.size, dtype=dtype)
    run_and_print(lambda part=part, key=key: part_timing.measure(
        part, key, opened.kind, flag_values.steps, peak), key, flag_values.json)


@cli.command
def main(argv, flag_values: flags.FlagValues = FLAGS):
  cli.no_arguments(argv)
  family = part_timing.family_of(flag_values.model)
  if family is not None:
    return parts_main(flag_values, family)
  config = command_line_config(flag_values)
  try:  # a --model, --mesh or --batch these devices cannot take: one line, before any output
    if config is None:
      model, mesh = family_registry.canonical_name(flag_values.model), parse_mesh(flag_values.mesh)
      sharding.check_batch_size(flag_values.batch, sharding.make_mesh(mesh))
      if not flag_values.suite:  # a model with no patch would time nothing
        stride = family_registry.stride(family_registry.create_model(model, num_classes=1))
        if flag_values.image_size < stride:
          raise errors.InvalidInput(f"--image_size={flag_values.image_size} is smaller than "
                                    f"{model}'s {stride} px patches: use {stride} or more")
    else:
      sharding.check_config_batches(config, sharding.make_mesh(config.mesh))
  except errors.UserError as e:
    raise cli.UsageError(cli.one_line(e)) from None
  mode, steps, json_path = flag_values.mode, flag_values.steps, flag_values.json
  if json_path == "-":  # standard output holds the table; never a file named '-'
    raise cli.UsageError("--json=- would mix JSON into the table on standard output: name a "
                         "file to append the JSON lines to")
  if json_path and storage.isdir(json_path):  # found before the whole benchmark, not after
    raise cli.UsageError(f"--json={json_path} is a directory: pass the path of a file "
                         "(created if missing, rows appended)")
  peak = flag_values.peak_tflops * 1e12 if flag_values.peak_tflops else None
  print(f"{jax.device_count()} x {jax.devices()[0].device_kind}, jax {jax.__version__}")
  if config is not None:
    print(f"--config={flag_values['config'].config_filename}: {describe_config(config, mode)}")
    print(header("pair" if batch_spec.text(config, 1) else "image"))
    batch = config.batch if mode == "train" else config.batch_eval
    key = dict(model=step_timing.config_model_name(config), mode=mode, batch=batch,
               image_size=config.pp.crop, dtype=config.dtype)
    run_and_print(lambda: step_timing.run_config(config, mode, steps, peak), key, json_path)
    return
  batch, dtype = flag_values.batch, flag_values.dtype
  fast_paths = dict(attention_impl=flag_values.attention, remat_policy=flag_values.remat,
                    scan_layers=flag_values.scan, fp8=flag_values.fp8,
                    unpadded_inference=not flag_values.padded_inference)
  configs = SUITE if flag_values.suite else [(model, mode, flag_values.image_size)]
  print(HEADER)
  started = time.time()
  for model, mode, size in configs:
    if time.time() - started > flag_values.time_budget:
      print(f"time budget of {flag_values.time_budget:.0f} s spent; skipping the rest")
      break
    key = dict(model=model, mode=mode, batch=batch, image_size=size, dtype=dtype)
    run_and_print(lambda: step_timing.run(model, mode, batch, size, dtype, steps, mesh, peak,
                                          **fast_paths), key, json_path)


def run_and_print(measure_fn, key: dict, json_path: Optional[str]) -> None:
  """Measures one configuration and prints its row; one too big for the device prints an
  out-of-memory line instead, and the caller goes on with the rest."""
  try:
    result = measure_fn()
  except (jax.errors.JaxRuntimeError, MemoryError) as e:
    # XLA says RESOURCE_EXHAUSTED at compilation, "INTERNAL: ... Out of memory allocating"
    # when a buffer is allocated at run time (CPU); numpy raises MemoryError on the host.
    if not (isinstance(e, MemoryError) or "RESOURCE_EXHAUSTED" in str(e)
            or "out of memory" in str(e).lower()):
      raise
    result = {**key, "error": "out of memory"}
    columns = _key_columns(key['model'], key['mode'], key['image_size'], key['batch'], key['dtype'])
    print(f"{columns}"
          " out of memory (try --remat=full, --dtype=bfloat16 "
          "or a smaller batch)", flush=True)
  else:
    print(format_row(result), flush=True)
  if json_path:
    earlier = storage.read_text(json_path) if storage.exists(json_path) else ""  # no appends on
    storage.write_atomic(json_path, earlier + json.dumps(result) + "\n")     # object stores


def describe_config(config: ml_collections.ConfigDict, mode: str) -> str:
  """What --config makes the benchmark time, on one line."""
  batch = (f"batch {config.batch} in {config.accum_steps} micro-batch(es)" if mode == "train"
           else f"batch_eval {config.batch_eval}")
  backend = ("softmax, padding masked" if config.pp.get("max_patches") else  # NaFlex
             attention.attention_backend(config.model.attention_impl, jnp.dtype(config.dtype)))
  size = (f"NaFlex at most {config.pp.max_patches} patches" if config.pp.get("max_patches")
          else f"{config.pp.crop} px")
  return (f"{config.model_name} {mode}, {batch}, {size}, {config.dtype}, mesh "
          f"{dict(config.mesh)}, attention {backend}, remat {config.model.remat_policy}, "
          f"scan {config.model.scan_layers}, fp8 {config.model.fp8}, optimizer "
          f"{config.optimizer}, objective {objectives.get(config).name}{_pair(config)}, "
          f"polyak_decay {config.polyak_decay:g}")


def _pair(config: ml_collections.ConfigDict) -> str:
  """An image-text pair's loss and text tower, for describe_config; '' for the rest."""
  if not batch_spec.text(config, 1):
    return ""
  loss, text = config.contrastive, config.text
  chunked = ", chunked" if loss.loss == "sigmoid" and loss.chunked else ""
  return (f" ({loss.loss} loss{chunked}; text tower {text.tower}, {text.depth} blocks of "
          f"{text.width}, {text.length} tokens)")


if __name__ == "__main__":
  cli.run(main, define_flags)
