"""Every config in configs/ planned for TPU slices (vit_jax.plan, compiled here, no TPU), and
the plans of two published runs, as tables for benchmarks/RESULTS.md.

  python benchmarks/tpu_plan.py --rows=benchmarks/tpu_plan.jsonl          # plan what is missing
  python benchmarks/tpu_plan.py --rows=benchmarks/tpu_plan.jsonl --table  # print the tables

Each (config, slice) is one JSON row, appended as soon as it is planned, so a run can stop
and go on later; rows already present are skipped. A config is planned with its defaults
(the dataset its docstring's first command runs; configs/pretrain.py: ViT-B_16 on
imagenet2012). Big configs take minutes each on a 2-core CPU.
"""

import argparse
import glob
import json
import math
import os
import re
import sys
import time

from absl import flags
from ml_collections import config_flags

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from vit_jax.planning import compiled_plan, compiler_readings  # pylint: disable=wrong-import-position

SLICES = ("v2-8", "v3-8", "v4-8", "v5e-8", "v5p-8", "v6e-8")
CONFIG_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "configs")
# The published runs: (name, config, overrides, slice).
PUBLISHED = (
    ("paper Table 2: ViT-L/16 on ImageNet-21k", "configs/pretrain.py:ViT-L_16,imagenet21k",
     {"dtype": "bfloat16"}, "v3-256"),
    ("big_vision vit_s16_i1k: ViT-S/16, ImageNet-1k, 90 epochs, batch 1024",
     "configs/pretrain.py:ViT-S_16,imagenet2012",
     {"dtype": "bfloat16", "batch": 1024, "total_steps": 1_281_167 * 90 // 1024}, "v3-8"),
)


def load(config_arg: str, overrides: dict):
  """A config as vit_jax.main loads FILE[:ARG], with overrides."""
  flag_values = flags.FlagValues()
  path = config_arg if os.path.isabs(config_arg) else os.path.join(CONFIG_DIR, "..", config_arg)
  config_flags.DEFINE_config_file("config", path, "", flag_values=flag_values)
  flag_values(["tpu_plan"])
  return compiled_plan.with_overrides(flag_values.config, **overrides)


def named_slice(config_file: str) -> str:
  """The slice a config's docstring names (`--tpu=SLICE` in its plan command)."""
  with open(config_file, encoding="utf-8") as f:
    found = re.search(r"--tpu=(\S+)", f.read())
  return found.group(1) if found else "v3-8"


def plan_row(name: str, config_arg: str, overrides: dict, tpu: str) -> dict:
  """One plan as a row; `seconds` and `cpu_seconds` (this process's, all threads: less
  sensitive to other jobs on the machine) are the whole plan's, to set beside the
  compile_seconds of its train and eval steps."""
  started, cpu = time.time(), time.process_time()
  try:
    report = compiled_plan.plan_steps(load(config_arg, overrides), compiler_readings.tpu_target(tpu))
  except Exception as e:  # pylint: disable=broad-except  # a row that says why
    return {"name": name, "slice": tpu, "error": " ".join(str(e).split())[:300]}
  return {"name": name, "config": config_arg, "overrides": overrides, "slice": tpu,
          "seconds": time.time() - started, "cpu_seconds": time.process_time() - cpu,
          **report}


def jobs(seconds_on_own_slice: dict):
  """Every config on the slice it names, then the published runs, then the other slices:
  the configs that planned fastest on their own slice first, so a run stopped early has
  covered the most of the table."""
  configs = [(f"configs/{os.path.basename(path)}", named_slice(path))
             for path in sorted(glob.glob(os.path.join(CONFIG_DIR, "*.py")))]
  for config_arg, own in configs:
    yield config_arg, config_arg, {}, own
  yield from PUBLISHED
  configs.sort(key=lambda c: seconds_on_own_slice.get(c, math.inf))
  for config_arg, own in configs:
    for tpu in SLICES:
      if tpu != own:
        yield config_arg, config_arg, {}, tpu


def read_rows(rows_path: str) -> dict:
  """(name, slice) -> row, the last row of each pair winning."""
  if not os.path.exists(rows_path):
    return {}
  with open(rows_path, encoding="utf-8") as f:
    return {(row["name"], row["slice"]): row for row in map(json.loads, f)}


def _gib(size) -> str:
  return "-" if size is None else f"{size / 2**30:.2f} GiB"


def _cell(row: dict) -> str:
  """One config on one slice: train peak GiB per device, and the estimates where it fits."""
  if row is None:
    return "not planned"
  if "error" in row:
    return "error: " + row["error"][:60]
  train = row["train"]
  peak = _gib(train["peak_bytes_per_device"])
  if not row["fits"]:
    step = "train" if not train["fits"] else "eval"
    return f"**no**: its {step} step needs {_gib(row[step]['peak_bytes_per_device'])}"
  speed, mfu = train.get("estimated_img_per_sec_per_chip"), train.get("estimated_mfu")
  if not speed:
    return f"{peak}, no time estimate"
  return f"{peak}, {speed:,.0f} img/s/chip, {f'{mfu:.0%}' if mfu else '-'}"


def table(rows_path: str) -> str:
  """The markdown tables of RESULTS.md from the rows: every config (rows) on every slice
  (columns), then the published runs."""
  rows = read_rows(rows_path)
  configs = sorted({name for name, _ in rows if name.startswith("configs/")})
  lines = ["| config | " + " | ".join(SLICES) + " |", "|---" * (len(SLICES) + 1) + "|"]
  for name in configs:
    cells = [_cell(rows.get((name, tpu))) for tpu in SLICES]
    pods = [f"{tpu}: {_cell(row)}" for (planned, tpu), row in sorted(rows.items())
            if planned == name and tpu not in SLICES]  # pre-training configs name a pod
    label = f"`{os.path.basename(name)}`" + (f" ({'; '.join(pods)})" if pods else "")
    lines.append(f"| {label} | " + " | ".join(cells) + " |")
  lines += ["", "| published run | slice | est. img/s | est. hours | est. TPU-core-days |",
            "|---|---|---|---|---|"]
  for (name, tpu), r in sorted(rows.items()):
    if not name.startswith("configs/") and "error" not in r:
      lines.append(f"| {name} | {tpu} | {r['train']['estimated_img_per_sec'] or 0:,.0f} | "
                   f"{r['estimated_hours'] or 0:,.1f} | {r['estimated_core_days'] or 0:,.1f} |")
  return "\n".join(lines)


def times(rows_path: str) -> str:
  """Each plan's time against one compile of the train and eval steps it reports."""
  lines = ["| config | slice | plan s | train + eval compile s | plan / compiles | "
           "plan CPU s | compiles CPU s | CPU plan / compiles |", "|---" * 8 + "|"]
  for (name, tpu), r in sorted(read_rows(rows_path).items()):
    if "error" in r or "seconds" not in r:
      continue
    compiles, cpu = (sum(r[step].get(key) or 0 for step in ("train", "eval"))
                     for key in ("compile_seconds", "compile_cpu_seconds"))
    cpu_cells = (f"{r['cpu_seconds']:,.0f} | {cpu:,.0f} | {r['cpu_seconds'] / cpu:.2f}x"
                 if cpu and "cpu_seconds" in r else "- | - | -")
    if compiles:
      lines.append(f"| {name} | {tpu} | {r['seconds']:,.0f} | {compiles:,.0f} | "
                   f"{r['seconds'] / compiles:.2f}x | {cpu_cells} |")
  return "\n".join(lines)


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--rows", default="benchmarks/tpu_plan.jsonl")
  parser.add_argument("--table", action="store_true", help="print the tables and exit")
  parser.add_argument("--times", action="store_true",
                      help="print each plan's time against its compiles and exit")
  parser.add_argument("--only", default="", help="regex over 'name slice' of the jobs to run")
  args = parser.parse_args()
  if args.table or args.times:
    print(table(args.rows) if args.table else times(args.rows))
    return
  done = read_rows(args.rows)
  seconds = {key: row.get("seconds", math.inf) for key, row in done.items()}
  for name, config_arg, overrides, tpu in jobs(seconds):
    if (name, tpu) in done or not re.search(args.only, f"{name} {tpu}"):
      continue
    row = plan_row(name, config_arg, overrides, tpu)
    print(f"{name} on {tpu}: {'error' if 'error' in row else 'fits' if row['fits'] else 'NO'}"
          f" ({row.get('seconds', 0):.0f} s)", flush=True)
    with open(args.rows, "a", encoding="utf-8") as f:
      f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
  main()
