"""Throughput of the real train step or inference on synthetic data: img/s and MFU.

  python -m vit_jax.benchmark --model=ViT-B_16 --mode=train --batch=256 --dtype=bfloat16
  python -m vit_jax.benchmark --config=configs/vit_b16.py:cifar10 --config.batch=256
  python -m vit_jax.benchmark --suite --json=results.jsonl

--config=FILE[:ARG] (with any --config.KEY=VALUE override, as for vit_jax.main) times
exactly the step a training config runs: its model and fast paths (attention, remat,
scan), batch (batch_eval for --mode=infer), crop, dtype, mesh, gradient accumulation and
optimizer; the head has the dataset's class count (from its metadata, no data read). So
"how fast will my run be" is one line, and main's train/img_per_sec compares with it.

Compile time is excluded from the step times and reported on its own. MFU divides
model FLOPs (analytic, cross-checked with XLA's cost analysis) by a peak measured on the
spot with a large matmul in the same dtype (or --peak_tflops).

Table columns: compile_s (compile time), median_s / min_s / max_s (step time over the timed
steps), img/s (batch / median step, all devices) and img/s/dev (per device), GFLOP (model
FLOPs per image: 3x the forward for training; XLA's count, also in the JSON as
xla_gflop_per_image, for hybrids), MFU, MiB/dev (device memory: arguments, outputs and
temporaries of the compiled step). `-`: not measured (--steps=0).
"""

import argparse
import json
import sys
import textwrap
import time
from typing import Dict, List, Optional

import jax
import jax.numpy as jnp
import ml_collections

from absl import flags
from ml_collections import config_flags

from vit_jax import cli, console, errors, objectives, sharding, throughput
from vit_jax.models import attention, vit, zoo
from vit_jax.runs import fs

SUITE = [(model, mode, size) for model in ("ViT-Ti_16", "ViT-B_16", "ViT-L_16")
         for size in (224, 384) for mode in ("train", "infer")]


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


def format_row(r: dict) -> str:
  return " ".join([_key_columns(r["model"], r["mode"], r["image_size"], r["batch"], r["dtype"])]
                  + [f"{_number(r[key], spec):>{width}}" for _, key, spec, width in COLUMNS])


HEADER = " ".join([_key_columns("model", "mode", "size", "batch", "dtype")]
                  + [f"{name:>{width}}" for name, _, _, width in COLUMNS])


def parse_mesh(text: str) -> Dict[str, int]:
  """'data=-1,fsdp=2' -> {'data': -1, 'fsdp': 2}."""
  try:
    return {k.strip(): int(v) for k, v in (part.split("=") for part in text.split(",") if part)}
  except ValueError:
    raise argparse.ArgumentTypeError(
        f"{text!r} is not AXIS=SIZE[,AXIS=SIZE...]: use e.g. data=-1,fsdp=2") from None


def _model_name(name: str) -> str:
  try:
    return zoo.canonical_name(name)
  except ValueError as e:
    raise argparse.ArgumentTypeError(str(e)) from None


def _at_least(minimum: int):
  """An argparse type: an integer >= minimum."""
  def parse(text: str) -> int:
    if not text.lstrip("-").isdigit() or int(text) < minimum:
      raise argparse.ArgumentTypeError(f"{text!r} is not an integer >= {minimum}")
    return int(text)
  return parse


class _Parser(argparse.ArgumentParser):
  """Bad arguments: one `error:` line and exit code 2 (no usage block; --help has it)."""

  def error(self, message):
    self.exit(2, f"error: {message} (python -m vit_jax.benchmark --help lists the flags)\n")


def build_parser() -> argparse.ArgumentParser:
  models = textwrap.fill(", ".join(zoo.RELEASED), break_on_hyphens=False,
                         initial_indent="  ", subsequent_indent="  ")
  parser = _Parser(prog="python -m vit_jax.benchmark", description=__doc__,
                   epilog=f"models (--model):\n{models}",
                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--model", type=_model_name, default="ViT-B_16",
                      help="model to time: a name listed under 'models' below, an AugReg "
                      "short name (B_16) or the paper's notation (ViT-B/16) (default "
                      "%(default)s)")
  parser.add_argument("--mode", choices=("train", "infer"), default="train",
                      help="train: the real train step (forward, backward, SGD update); "
                      "infer: the forward pass only (default %(default)s)")
  parser.add_argument("--batch", type=_at_least(1), default=8,
                      help="global batch, split over the mesh's data axes (default %(default)s)")
  parser.add_argument("--image-size", "--image_size", dest="image_size", type=_at_least(1),
                      default=224, help="input side in pixels (default %(default)s)")
  parser.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32",
                      help="compute dtype; params stay float32 (default %(default)s)")
  parser.add_argument("--steps", type=_at_least(0), default=10,
                      help="timed steps after compilation; 0: compile only (default %(default)s)")
  parser.add_argument("--mesh", type=parse_mesh, default={"data": -1},
                      help="device mesh as AXIS=SIZE,... over data, fsdp, tensor; -1: all "
                      "remaining devices (default data=-1)")
  parser.add_argument("--attention", choices=attention.ATTENTION_IMPLS, default="dot_product",
                      help="attention implementation (default %(default)s)")
  parser.add_argument("--padded_inference", action="store_true",
                      help="cuDNN attention: pad odd token counts in the forward pass too, as "
                      "gradients need (default: --mode=infer runs it unpadded)")
  parser.add_argument("--remat", choices=tuple(vit.REMAT_POLICIES), default="none",
                      help="per-block rematerialisation policy (default %(default)s)")
  parser.add_argument("--scan", action="store_true",
                      help="nn.scan over the blocks: one compiled block, faster compiles")
  parser.add_argument("--peak_tflops", type=float, default=None,
                      help="device peak TFLOP/s for MFU instead of measuring a matmul")
  parser.add_argument("--config", default=None, metavar="FILE[:ARG]",
                      help="time the step of this training config (configs/*.py[:arg]) instead "
                      "of --model/--batch/--image-size/--dtype/--mesh/--attention/"
                      "--padded_inference/--remat/--scan; override its values with "
                      "--config.KEY=VALUE")
  parser.add_argument("--suite", action="store_true",
                      help="ViT-Ti/B/L_16 at 224 and 384 px, train and infer, instead of "
                      "--model/--mode/--image-size")
  parser.add_argument("--time_budget", type=float, default=1800,
                      help="seconds after which --suite skips the remaining configurations "
                      "(default %(default)s)")
  parser.add_argument("--json", default=None, metavar="FILE",
                      help="append one JSON object per configuration to FILE")
  return parser


# Flags that --config replaces (its model, batch, crop, dtype, mesh and fast paths).
CONFIG_REPLACES = ("--model", "--batch", "--image-size", "--image_size", "--dtype", "--mesh",
                   "--attention", "--padded_inference", "--remat", "--scan", "--suite")


def load_config(path: str, overrides: List[str]) -> ml_collections.ConfigDict:
  """A training config as vit_jax.main loads it: FILE[:ARG], then --config.KEY=VALUE."""
  argv = ["benchmark", f"--config={path}", *overrides]
  flag_values = flags.FlagValues()
  config_flags.DEFINE_config_file("config", None, "training config", flag_values=flag_values,
                                  lock_config=True, sys_argv=argv)  # defines --config.KEY
  flag_values(argv)
  config = flag_values.config
  config.get("dataset")  # a config that failed to load raises only when touched
  return config


def _config_from_args(parser, args, extra: List[str], argv: List[str]):
  """The --config of the command line, or None; any mistake is one `error:` line."""
  if args.config is None:
    if extra:
      parser.error(f"unrecognized arguments: {' '.join(extra)}")
    return None
  unknown = [a for a in extra if not a.startswith("--config.")]
  replaced = [a.split("=")[0] for a in argv if a.split("=")[0] in CONFIG_REPLACES]
  if unknown or replaced:
    parser.error(f"{' '.join(unknown or replaced)} cannot go with --config, which sets the "
                 "model, batch, size, dtype, mesh and fast paths: override them with "
                 "--config.KEY=VALUE")
  try:
    return load_config(args.config, extra)
  except cli.FLAG_ERRORS + (OSError,) as e:
    parser.error(f"cannot load --config={args.config}: {cli.one_line(e)}")


def main(argv=None):
  parser = build_parser()
  argv = sys.argv[1:] if argv is None else list(argv)
  args, extra = parser.parse_known_args(argv)
  config = _config_from_args(parser, args, extra, argv)
  console.quiet_libraries(verbosity_flag_present=False)  # argparse: no --verbosity flag
  try:  # a --mesh or --batch these devices cannot take: one line, before any output
    if config is None:
      sharding.check_batch_size(args.batch, sharding.make_mesh(args.mesh))
    else:
      sharding.check_config_batches(config, sharding.make_mesh(config.mesh))
  except errors.UserError as e:
    parser.error(cli.one_line(e))
  peak = args.peak_tflops * 1e12 if args.peak_tflops else None
  print(f"{jax.device_count()} x {jax.devices()[0].device_kind}, jax {jax.__version__}")
  if config is not None:
    print(f"--config={args.config}: {describe_config(config, args.mode)}")
    print(HEADER)
    batch = config.batch if args.mode == "train" else config.batch_eval
    key = dict(model=config.model_name, mode=args.mode, batch=batch, image_size=config.pp.crop,
               dtype=config.dtype)
    run_and_print(lambda: throughput.run_config(config, args.mode, args.steps, peak), key,
                  args.json)
    return
  configs = SUITE if args.suite else [(args.model, args.mode, args.image_size)]
  print(HEADER)
  started = time.time()
  for model, mode, size in configs:
    if time.time() - started > args.time_budget:
      print(f"time budget of {args.time_budget:.0f} s spent; skipping the rest")
      break
    key = dict(model=model, mode=mode, batch=args.batch, image_size=size, dtype=args.dtype)
    run_and_print(lambda: throughput.run(model, mode, args.batch, size, args.dtype, args.steps,
                                         args.mesh, peak, attention_impl=args.attention,
                                         remat_policy=args.remat, scan_layers=args.scan,
                                         unpadded_inference=not args.padded_inference),
                  key, args.json)


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
    print(f"{_key_columns(key['model'], key['mode'], key['image_size'], key['batch'], key['dtype'])}"
          " out of memory (try --remat=full, --dtype=bfloat16 "
          "or a smaller batch)", flush=True)
  else:
    print(format_row(result), flush=True)
  if json_path:
    earlier = fs.read_text(json_path) if fs.exists(json_path) else ""  # no appends on
    fs.write_atomic(json_path, earlier + json.dumps(result) + "\n")     # object stores


def describe_config(config: ml_collections.ConfigDict, mode: str) -> str:
  """What --config makes the benchmark time, on one line."""
  batch = (f"batch {config.batch} in {config.accum_steps} micro-batch(es)" if mode == "train"
           else f"batch_eval {config.batch_eval}")
  backend = attention.attention_backend(config.model.attention_impl, jnp.dtype(config.dtype))
  return (f"{config.model_name} {mode}, {batch}, {config.pp.crop} px, {config.dtype}, mesh "
          f"{dict(config.mesh)}, attention {backend}, remat {config.model.remat_policy}, "
          f"scan {config.model.scan_layers}, optimizer {config.optimizer}, objective "
          f"{objectives.get(config).name}, polyak_decay {config.polyak_decay:g}")


if __name__ == "__main__":
  main()
