"""Will this config fit, and how fast: the main job's steps compiled for a TPU slice (or the
local devices) ahead of time, before anyone rents one. Nothing runs; no TPU is needed.

  python -m vit_jax.plan --config=configs/vit_h14.py --tpu=v3-8
  python -m vit_jax.plan --config=configs/pretrain.py:ViT-L_16,imagenet21k --tpu=v3-256 \\
      --config.dtype=bfloat16 --json=plan.json
  python -m vit_jax.plan --config=configs/vit_b16.py:cifar10      # this machine's devices

--config and --config.KEY=VALUE are exactly vit_jax.main's. The train and eval steps are
the ones vit_jax.main would run (same model, mesh, shardings, batch split, accumulation,
optimizer), compiled by XLA for --tpu (Cloud's names: v2-8, v3-8 ... v3-2048, v4-8,
v5e-16 / v5litepod-16, v5p-8, v6e-8; or a topology such as v3:4x4; needs libtpu:
pip install 'vit_jax[tpu]'), or for --gpu (one GPU: h100, h200, a100-80gb, a100-40gb, with
its memory as a JAX process takes it; compiled for this machine's GPU, or without one for
a compile-only TPU chip under the GPU's memory: its buffer schedule stands in for the
GPU's, and no speed is estimated). Reported per device: the memory of each step against the
chip's usable HBM, FLOPs per image, the compiler's time estimate as img/s and MFU, the
config's total_steps in hours, chip-hours and TPU-core-days, and the collectives.
Speeds are the compiler's per-operation roofline (XLA's optimal_seconds), not
measurements: they leave out the input pipeline, the host and the network between hosts.

When a step does not fit, the accumulation (and remat, fsdp, bfloat16 where that is not
enough) that the step's own bytes call for, keeping the global batch, is computed,
verified by compiling it and printed as --config flags (--json: `suggestions`), within
--suggest_budget seconds; docs/plan_time.md says how.

Each compile is logged as it starts and ends, with its time, and a long one shows its
elapsed time while it runs. A plan compiles the train and eval steps once each, plus the
optimizer update alone where the step accumulates gradients (seconds); a config with
scan_layers, or a step that does not fit, adds loop-free twins of one and two blocks
to count its FLOPs in full. docs/plan_time.md says more.

A contrastive config (config.objective='contrastive': an image tower and a text tower) is
planned per image-caption pair (GFLOP/pair, pairs/s, MFU over both towers' FLOPs, a locked
tower counted forward only), with its loss's memory per device with and without chunking
(the sigmoid loss's ring) at the config's batch and big_vision's (4k, 16k, 32k), the
step's peak estimated at each, and the largest batch that fits, verified by compiling
(--json: `contrastive_loss_memory`). Such a loss pairs the whole batch and takes no
accumulation: a step that does not fit is sized by its global batch instead.

  python -m vit_jax.plan --config=configs/lit_coco.py --tpu=v3-8
  python -m vit_jax.plan --config=configs/siglip_lit_coco.py --tpu=v4-64 \
      --config.batch=32768 --config.contrastive.chunked=False

Exit status: 0 everything fits, 3 something does not, 2 a usage mistake.
"""

import dataclasses
import json
import os
import sys
import time
from typing import Any, Dict, List, Optional

from absl import flags
from ml_collections import config_flags

from vit_jax.base import cli, console

FLAGS = flags.FLAGS
DOES_NOT_FIT_EXIT_CODE = 3
KIND = "plan"  # the writer's name in --json's no-clobber stamp (vit_jax.base.no_clobber)
ESTIMATE_NOTE = ("speeds are the TPU compiler's estimates (per-operation roofline), not "
                 "measurements; the input pipeline and the network are not included")
NO_ESTIMATE_NOTE = ("XLA estimates time for TPUs only: time this config's step with "
                    "python -m vit_jax.benchmark --config=...")
NO_TPU_ESTIMATE_NOTE = ("the TPU compiler gave no usable time estimate for these steps "
                        "(a negative optimal_seconds): memory and FLOPs stand")
DOES_NOT_FIT_NOTE = ("no estimate: neither step fits, nor does one micro-batch of the train "
                     "step")


def define_flags(flag_values: flags.FlagValues = FLAGS) -> None:
  define = dict(flag_values=flag_values)
  config_flags.DEFINE_config_file("config", None, "Experiment config file (configs/*.py[:arg]), "
                                  "as for vit_jax.main.", lock_config=True, **define)
  flags.DEFINE_string("tpu", None, "TPU slice to compile for (v3-8, v5e-16, v3:4x4 ...); "
                      "default: this machine's devices.", **define)
  flags.DEFINE_string("gpu", None, "One GPU to plan for (h100, h200, a100-80gb, "
                      "a100-40gb): its memory as a JAX process takes it "
                      "(XLA_PYTHON_CLIENT_MEM_FRACTION, default 0.75); without a GPU here, a "
                      "compile-only TPU chip stands in (needs libtpu).", **define)
  flags.DEFINE_string("json", None, "Also write the report as JSON to this path (checked "
                      "before compiling; '-': the JSON on stdout, the report on stderr).",
                      **define)
  flags.DEFINE_boolean("overwrite", False, "Write --json over an existing file that this "
                       "command did not write (refused by default: nothing is clobbered).",
                       **define)
  flags.DEFINE_integer("num_classes", None, "Head size (default: from the dataset's "
                       "metadata).", lower_bound=1, **define)
  flags.DEFINE_float("hbm_limit_gib", None, "Usable memory per device in GiB, below the "
                     "chip's (headroom for other programs).", lower_bound=0.001, **define)
  flags.DEFINE_boolean("suggest", True, "When a step does not fit, search for config "
                       "changes that do; for a contrastive config, also verify the largest "
                       "batch that fits by compiling.", **define)
  flags.DEFINE_float("suggest_budget", 900, "Seconds the search for changes may take.",
                     lower_bound=0, **define)
  flags.DEFINE_integer("max_suggestions", 1, "How many changes that fit to look for (each "
                       "under a stronger remat policy, fsdp or bfloat16 than the last).",
                       lower_bound=1, **define)
  flags.mark_flags_as_required(["config"], flag_values=flag_values)


def gib(value: Optional[float]) -> str:
  """Bytes as GiB, or MiB below a tenth of a GiB (tiny models in tests and demos)."""
  if value is None:
    return "-"
  return f"{value / 2**30:.2f}G" if value >= 2**30 / 10 else f"{value / 2**20:.1f}M"


def _number(value: Optional[float], spec: str = ",.0f") -> str:
  return "-" if value is None else format(value, spec)


def compute_note(report: Dict[str, Any]) -> str:
  """Where the speeds come from, or why there are none."""
  if any(report[step]["estimated_step_seconds"] for step in ("train", "eval")):
    return ESTIMATE_NOTE
  if not report["chips"]:
    return NO_ESTIMATE_NOTE
  unfit = [step for step in ("train", "eval") if report[step]["gflop_per_image"] is None]
  if len(unfit) == 2:  # nothing compiled to read
    return DOES_NOT_FIT_NOTE
  if unfit:
    return (f"no time estimate: the {unfit[0]} step does not fit, and the TPU compiler priced "
            "the other at a negative optimal_seconds: its memory and FLOPs stand")
  return NO_TPU_ESTIMATE_NOTE


def _what_is_trained(report: Dict[str, Any]) -> str:
  """'ViT-B_16, 1000 classes' or, for an image-text pair, its towers and loss."""
  text = report.get("text_tower")
  if text is None:
    return f"{report['model']}, {report['num_classes']} classes"
  memory = report["contrastive_loss_memory"]
  return (f"{report['model']} image tower + {text['tower']} text tower ({text['depth']} "
          f"blocks of {text['width']}, {text['length']} tokens), {memory['loss']} loss"
          + (" (chunked)" if memory["way"] == "chunked" else ""))


def _verdict(fits: Optional[bool]) -> str:
  return "" if fits is None else " ok" if fits else " NO"


def format_contrastive(report: Dict[str, Any]) -> List[str]:
  """The contrastive loss's lines: its memory per device with and without chunking at
  the config's and big_vision's batches, the step's estimated peak at each, and the
  largest batch that fits."""
  memory = report["contrastive_loss_memory"]
  devices = memory["batch_devices"]
  ring = (f"the ring passes captions round {devices} devices" if devices > 1
          else "on one device the two are the same")
  softmax = ("; this config's softmax loss gathers the batch (the plain figures; the "
             "chunked ones are the sigmoid loss's)" if memory["loss"] == "softmax" else "")
  lines = [f"contrastive loss per device ({memory['embedding_dim']}-wide embeddings; "
           f"chunked: {ring}{softmax}); the step's peak estimated from the compiled step, "
           "ok/NO against the usable memory:",
           "      batch  per device   loss chunked  loss plain  step chunked  step plain"]
  for row in memory["rows"]:
    steps = [f"{gib(row[f'{way}_step_bytes'])}{_verdict(row[f'{way}_fits'])}"
             for way in ("chunked", "plain")]
    lines.append(f"  {row['batch']:>9,} {row['per_device']:>11,} "
                 f"{gib(row['chunked_loss_bytes']):>14} {gib(row['plain_loss_bytes']):>11} "
                 f"{steps[0]:>13} {steps[1]:>11}")
  estimated = memory["largest_batch_estimated"]
  guess = ("estimated " + ", ".join(f"{way} {_number(estimated[way])}"
                                    for way in ("chunked", "plain"))
           if estimated["chunked"] is not None else "no estimate (no compiled step to read)")
  largest = memory["largest_batch"]
  if largest is None:
    verified = "not verified by compiling (--nosuggest)"
  elif largest["batch"] is None:
    verified = "none verified by compiling"
  else:
    verified = (f"{largest['batch']:,} verified by compiling (peak "
                f"{gib(largest['peak_bytes_per_device'])} per device)")
  if largest and largest["smallest_not_fitting"]:
    verified += f"; {largest['smallest_not_fitting']:,} does not fit"
  if largest and largest["out_of_budget"]:
    verified += f" (the search ran out of its {largest['budget_s']:.0f} s budget)"
  lines.append(f"largest batch that fits: {verified}; {guess}")
  return lines


def format_report(report: Dict[str, Any]) -> str:
  """The human-readable report."""
  mesh = " ".join(f"{axis}={size}" for axis, size in report["mesh"].items())
  chips = f"{report['chips']} chips, " if report["chips"] else ""
  unit, rate = ("pair", "pairs/s") if report.get("example") == "pair" else ("img", "img/s")
  lines = [
      f"{report['config']} on {report['slice']} ({report['device_kind']}, {chips}"
      f"{report['devices']} devices, mesh {mesh})",
      f"{_what_is_trained(report)}, " + (
          f"NaFlex at most {report['max_patches']} patches, " if report.get("max_patches")
          else f"{report['image_size']} px, ") +
      f"{report['dtype']}; batch {report['batch']} ({report['per_device_batch']} per device"
      f" in {report['accum_steps']} micro-batch(es) of {report['per_device_micro_batch']}); "
      f"eval batch {report['batch_eval']} ({report['per_device_eval_batch']} per device)",
      f"memory per device (usable: {gib(report['hbm_bytes_per_device'])}):",
      "         state   batch   temporaries    peak   fits"]
  for step in ("train", "eval"):
    r = report[step]
    verdict = "yes" if r["fits"] else (f"NO, short by {gib(r['shortfall_bytes'])}"
                                       if r.get("shortfall_bytes") else "NO")
    lines.append(f"  {step:<5} {gib(r['state_bytes_per_device']):>7} "
                 f"{gib(r['batch_bytes_per_device']):>7} {gib(r.get('temp_bytes')):>13} "
                 f"{gib(r['peak_bytes_per_device']):>7}   {verdict}")
  lines.append(f"compute ({compute_note(report)}):")
  for step in ("train", "eval"):
    r = report[step]
    if r["estimated_img_per_sec"] is None and r["gflop_per_image"] is None:
      lines.append(f"  {step:<5} no estimate (the step does not fit, nor one micro-batch)")
      continue
    check = (f" (analytic {_number(r['model_gflop_per_image'], ',.1f')}, "
             f"x{r['flops_vs_analytic']:.3f})" if r.get("flops_vs_analytic") else "")
    per_chip = (f" ({_number(r['estimated_img_per_sec_per_chip'])} per chip)"
                if r.get("estimated_img_per_sec_per_chip") else "")
    mfu = f", MFU {r['estimated_mfu']:.1%}" if r.get("estimated_mfu") else ""
    lines.append(f"  {step:<5} {_number(r['gflop_per_image'], ',.1f')} GFLOP/{unit}{check}; "
                 f"step {_number(r['estimated_step_seconds'], '.4f')} s, "
                 f"{_number(r['estimated_img_per_sec'])} {rate}{per_chip}{mfu}")
  if report["estimated_hours"]:
    days = (f", {report['estimated_core_days']:,.2f} TPU-core-days"
            if report["estimated_core_days"] else "")
    lines.append(f"  total_steps {report['total_steps']:,}: {report['estimated_hours']:,.1f} h"
                 f" ({_number(report['estimated_chip_hours'], ',.0f')} chip-hours{days}), "
                 "training steps only")
  if report["needed_img_per_sec_per_host"]:
    hosts = report["hosts"]
    lines.append(f"input: each of {hosts} host{'s' if hosts > 1 else ''} must decode and augment "
                 f"{_number(report['needed_img_per_sec_per_host'])} img/s (batch "
                 f"{report['per_host_batch']} per host) to keep up; not checked here: measure "
                 "with benchmarks/input_pipeline.py")
  if report.get("contrastive_loss_memory"):
    lines += format_contrastive(report)
  lines += [f"note: {note}" for note in report.get("notes", [])[1:]]
  if report["train"].get("collectives"):
    lines.append("collectives in the train step (each written once; loops repeat them): "
                 + ", ".join(f"{c['kind']} x{c['count']} ({gib(c['bytes'])})"
                             for c in report["train"]["collectives"]))
  return "\n".join(lines)


def does_not_fit_line(report: Dict[str, Any]) -> str:
  """One line: which step, by how much, and the verified changes that fit."""
  parts = []
  for step in ("train", "eval"):
    r = report[step]
    if not r["fits"]:
      need = f"needs {gib(r['peak_bytes_per_device'])} per device, " if r[
          "peak_bytes_per_device"] else ""
      parts.append(f"the {step} step does not fit {report['slice']}: {need}"
                   f"{gib(report['hbm_bytes_per_device'])} usable")
  fixes = [" ".join(s["flags"]) for s in report["suggestions"]]
  search = report.get("search")
  batches = " or ".join(f"config.{'batch' if step == 'train' else 'batch_eval'}"
                        for step in ("train", "eval") if not report[step]["fits"])
  if search is None:
    return "; ".join(parts) + (f"; not searched for changes that fit (--nosuggest): lower "
                               f"{batches}, use bfloat16 (--config.dtype=bfloat16) or a "
                               "larger slice")
  if search["out_of_budget"]:
    left = search["not_tried"]
    listed = " | ".join(" ".join(changes) or "accumulation alone" for changes in left[:4])
    more = f" and {len(left) - 4} more" if len(left) > 4 else ""
    tail = (f"; the search for changes ran out of its {search['budget_s']:.0f} s budget after "
            f"{len(search['tried'])} compile(s)" + ("; fits with: " + " | ".join(fixes)
                                                     if fixes else ", none of which fits")
            + (f"; not tried: {listed}{more} (raise --suggest_budget to try them)"
               if left else ""))
  elif fixes:
    same = not any("batch" in s["changes"] for s in report["suggestions"])
    tail = ("; fits with (" + ("same global batch" if same else
                               "a smaller global batch: this objective does not accumulate "
                               "gradients") + ", verified by compiling): " + " | ".join(fixes))
  else:
    tail = (f"; no change keeping the global batch fits (checked: "
            f"{'; '.join(search['checked']) or 'nothing'}): lower {batches} or use a "
            "larger slice")
  if search["failed"]:
    tail += "; failed to compile for another reason than memory: " + " | ".join(
        f"{' '.join(f['flags'])}: {f['error']}" for f in search["failed"][:2])
  return "; ".join(parts) + tail


def check_json_path(path: str) -> None:
  """Fails in one line, before minutes of compiling, where --json cannot be written: a
  folder, a path below a file, or a folder this user may not create files in (tried with
  a file created and removed at once: permission bits do not stop root, a read-only mount
  or /proc does)."""
  from vit_jax.base import errors, storage  # pylint: disable=import-outside-toplevel
  if path == "-" or storage.is_url(path):
    return
  if not path.strip() or os.path.isdir(path):
    raise errors.InvalidInput(f"--json={path} is {'a folder' if path.strip() else 'empty'}: "
                              "name the file to write, e.g. --json=plan.json")
  folder = os.path.dirname(os.path.abspath(path))
  while not os.path.exists(folder):
    folder = os.path.dirname(folder)
  if not os.path.isdir(folder):
    raise errors.InvalidInput(f"--json={path}: {folder} is a file, not a folder; name "
                              "another path")
  probe = os.path.join(folder, f".vit_jax-plan-probe-{os.getpid()}")
  try:
    os.close(os.open(probe, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
    os.unlink(probe)
  except OSError as e:
    raise errors.InvalidInput(f"--json={path}: cannot create files in {folder} "
                              f"({e.strerror}); name a path you may write") from None


def refuse_untrained(name: str) -> None:
  """One line, before the static checks, for a config.model_name that names a checkpoint the
  benchmark times part by part and whose family plan refuses (the main job trains no such
  model): it says how to time it instead. Any other name is the static checks' to judge (a
  family's own line for a name that builds no model, the close matches of an unknown one)."""
  from vit_jax.base import errors  # pylint: disable=import-outside-toplevel
  from vit_jax.planning import part_timing  # pylint: disable=import-outside-toplevel
  family = part_timing.family_of(name)
  if family is None:
    return
  try:
    family.refuse("plan", f"config.model_name={name}")
  except errors.InvalidInput as e:
    raise cli.UsageError(f"{e}; time {family.benchmark_parts.timed} with python -m "
                         f"vit_jax.benchmark --model={name}") from None


@cli.command
def main(argv, flag_values: flags.FlagValues = FLAGS):
  cli.no_arguments(argv)
  config = cli.load_config(flag_values)
  cli.check_dataset_override(flag_values)
  from vit_jax.base import errors, no_clobber
  refuse_untrained(str(config.get("model_name") or ""))
  from vit_jax.planning import compiled_plan, compiler_readings, fit_search
  from vit_jax.training import objectives, pretrained_file, sharding, static_checks
  try:
    pretrained_file.check_offline(config)  # a missing local file; nothing is downloaded
    config = pretrained_file.with_budget(config)  # a NaFlex pretrained file's budget; 0: squares
    if flag_values.json is not None:
      check_json_path(flag_values.json)
      no_clobber.claim_output_file(flag_values.json, KIND, flag_values.overwrite,
                                   stdout_ok=True)
    limit = int(flag_values.hbm_limit_gib * 2**30) if flag_values.hbm_limit_gib else None
    if flag_values.tpu is not None and flag_values.gpu is not None:
      raise errors.InvalidInput("--tpu and --gpu name two targets: plan for one of them")
    if flag_values.tpu is not None:  # an empty --tpu= is a mistake, not this machine
      target = compiler_readings.tpu_target(flag_values.tpu, limit)
    elif flag_values.gpu is not None:
      target = compiler_readings.gpu_target(flag_values.gpu, limit)
    else:
      target = compiler_readings.local_target()
      if limit:
        target = dataclasses.replace(target, hbm_bytes_per_device=limit)
    mesh = sharding.make_mesh(config.mesh, devices=target.devices)
    static_checks.check_static(config, mesh, objectives.get(config))
  except (errors.InvalidInput, FileNotFoundError) as e:
    raise cli.UsageError(cli.one_line(e)) from None
  started = time.monotonic()
  report = {"config": flag_values["config"].config_filename,
            **compiled_plan.plan_steps(config, target, flag_values.num_classes)}
  report["suggestions"], report["search"] = [], None
  if not report["fits"] and flag_values.suggest:
    console.log.info("it does not fit: sizing accumulation and remat from the step's bytes, "
                     "each verified by compiling (up to %.0f s)",
                     flag_values.suggest_budget)
    search = fit_search.search(config, target, report, flag_values.suggest_budget,
                               flag_values.max_suggestions)
    report["suggestions"], report["search"] = search.found, search.as_json()
  memory = report.get("contrastive_loss_memory")
  if memory is not None and flag_values.suggest:
    searched = None if report["train"]["fits"] else search
    if report["train"]["fits"]:
      console.log.info("the largest batch that fits: sized from the step's and the loss's "
                       "bytes, each verified by compiling (up to %.0f s)",
                       flag_values.suggest_budget)
    memory["largest_batch"] = fit_search.largest_batch(config, target, report,
                                                       flag_values.suggest_budget, searched)
  report["notes"] = [compute_note(report)] + ([target.note] if target.note else [])
  report["plan_seconds"] = time.monotonic() - started
  console.log.info("planned in %s", console.duration(report["plan_seconds"]))
  text = json.dumps({**no_clobber.written_by(KIND), **report}, indent=1) + "\n"
  if flag_values.json == "-":
    print(format_report(report), file=sys.stderr, flush=True)
    print(text, end="", flush=True)
  else:
    print(format_report(report), flush=True)
  if flag_values.json and flag_values.json != "-":  # stamped: a rerun may replace it
    no_clobber.write_text(flag_values.json, text)
  if not report["fits"]:
    print(f"error: {does_not_fit_line(report)}", file=sys.stderr)
    sys.exit(DOES_NOT_FIT_EXIT_CODE)


if __name__ == "__main__":
  cli.run(main, define_flags)
