"""End to end: vit_jax.main's training img/s against the bare step's (vit_jax.benchmark
--config) for the same config on the same machine, and the input pipeline's own img/s.

  python benchmarks/end_to_end.py                                   # the demo config, CPU
  python benchmarks/end_to_end.py --config=configs/vit_b16.py:/data/jpegs \\
      --override=config.batch=512 --override=config.dtype=bfloat16 --steps=300   # a GPU

Runs, one after the other in fresh processes: (1) the benchmark of the config's step on
synthetic device-resident data, (2) the main job for --steps steps (evaluation and the
checkpoint only at the end, so they stay out of the timing), reading train/img_per_sec
from its metrics.jsonl (the progress rows after the first, i.e. after compilation), and
(3) the input pipeline alone on the host (preprocessing and batching, no device); (1) and
(2) alternate --repeats times and the medians count, so that a passing load on a shared
machine moves both alike. Prints one table row and, with --json, appends the numbers. The
ratio main / benchmark is the share of the bare step's speed a user's run gets; the goal
is >= 0.95.
"""

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _run(args, **kwargs) -> str:
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
  done = subprocess.run([sys.executable, *args], cwd=REPO, env=env, capture_output=True,
                        text=True, check=False, **kwargs)
  if done.returncode:
    sys.exit(f"error: {' '.join(args[:3])} failed:\n{done.stderr[-3000:]}")
  return done.stdout


def benchmark_img_per_sec(config: str, overrides, steps: int) -> float:
  """Median-step img/s of the bare train step (vit_jax.benchmark --config)."""
  with tempfile.TemporaryDirectory() as tmp:
    out = os.path.join(tmp, "bench.jsonl")
    _run(["-m", "vit_jax.benchmark", f"--config={config}", *[f"--{o}" for o in overrides],
          f"--steps={steps}", f"--json={out}"])
    with open(out, encoding="utf-8") as f:
      return json.loads(f.readline())["img_per_sec"]


def main_img_per_sec(config: str, overrides, steps: int, progress_every: int) -> float:
  """vit_jax.main's train/img_per_sec, the median over its progress rows after the first."""
  with tempfile.TemporaryDirectory() as workdir:
    _run(["-m", "vit_jax.main", f"--config={config}", f"--workdir={workdir}",
          *[f"--{o}" for o in overrides], f"--config.total_steps={steps}",
          f"--config.progress_every={progress_every}", f"--config.eval_every={steps}",
          f"--config.checkpoint_every={steps}", "--config.warmup_steps=0"])
    with open(os.path.join(workdir, "metrics.jsonl"), encoding="utf-8") as f:
      rows = [json.loads(line) for line in f]
  rates = [row["train/img_per_sec"] for row in rows if "train/img_per_sec" in row]
  if len(rates) < 3:
    sys.exit(f"error: only {len(rates)} progress rows; raise --steps or lower --progress_every")
  return statistics.median(rates[1:])


def pipeline_img_per_sec(config: str, overrides, steps: int) -> float:
  """The host input pipeline alone: batches of the config's train split per second."""
  code = f"""
import json, sys, time
from vit_jax import benchmark
from vit_jax.data.tf_stack import tf_pipeline as pipeline
config = benchmark.load_config({config!r}, {[f"--{o}" for o in overrides]!r})
dataset = pipeline.open_dataset(config)
batches = dataset.train_batches(batch_size=config.batch, start_step=0, num_steps={steps},
                                seed=0, process_index=0, process_count=1)
next(batches)
start = time.perf_counter()
count = sum(1 for _ in batches)
print(json.dumps(count * config.batch / (time.perf_counter() - start)))
"""
  return float(_run(["-c", code]).strip().splitlines()[-1])


def machine() -> str:
  cpu = platform.processor() or platform.machine()
  try:
    with open("/proc/cpuinfo", encoding="utf-8") as f:
      cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
  except (OSError, StopIteration):
    pass
  return f"{os.cpu_count()} cores, {cpu}"


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--config", default="configs/demo.py", help="training config FILE[:ARG]")
  parser.add_argument("--override", action="append", default=[], metavar="config.KEY=VALUE",
                      help="a config override for all three runs (repeatable)")
  parser.add_argument("--steps", type=int, default=400, help="main job steps (default 400)")
  parser.add_argument("--progress_every", type=int, default=50,
                      help="steps per main-job rate measurement (default 50)")
  parser.add_argument("--bench_steps", type=int, default=100,
                      help="timed steps of the benchmark (default 100)")
  parser.add_argument("--repeats", type=int, default=3,
                      help="alternating benchmark / main runs; medians count (default 3)")
  parser.add_argument("--json", default=None, help="append the numbers to this JSON-lines file")
  args = parser.parse_args()

  started = time.time()
  benches, mains = [], []
  for _ in range(args.repeats):
    benches.append(benchmark_img_per_sec(args.config, args.override, args.bench_steps))
    mains.append(main_img_per_sec(args.config, args.override, args.steps, args.progress_every))
  bench, main_rate = statistics.median(benches), statistics.median(mains)
  pipeline = pipeline_img_per_sec(args.config, args.override, min(args.steps, 200))
  import jax  # after the runs: this process holds no device while they run
  result = {"config": args.config, "overrides": args.override, "machine": machine(),
            "devices": f"{jax.device_count()} x {jax.devices()[0].device_kind}",
            "jax": jax.__version__, "main_img_per_sec": main_rate,
            "benchmark_img_per_sec": bench, "ratio": main_rate / bench,
            "main_runs": mains, "benchmark_runs": benches,
            "pipeline_img_per_sec": pipeline, "seconds": time.time() - started,
            "date": time.strftime("%Y-%m-%d")}
  print(f"{result['machine']}; {result['devices']}, jax {result['jax']}")
  print(f"{'config':<24} {'main img/s':>11} {'bench img/s':>12} {'ratio':>6} "
        f"{'pipeline img/s':>15}")
  print(f"{args.config:<24} {main_rate:>11.1f} {bench:>12.1f} {main_rate / bench:>6.3f} "
        f"{pipeline:>15.1f}")
  if args.json:
    with open(args.json, "a", encoding="utf-8") as f:
      f.write(json.dumps(result) + "\n")


if __name__ == "__main__":
  main()
